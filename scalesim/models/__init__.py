"""Model zoo: models as layers of operations with FLOPs, elements moved and parameters."""

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec
from scalesim.models.zoo import get_model, model_info, model_names

__all__ = ["LayerSpec", "ModelSpec", "OpSpec", "get_model", "model_info", "model_names"]
