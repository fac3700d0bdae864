"""Hardware catalog: GPUs and links, each with its datasheet source."""

from scalesim.hardware.catalog import get_gpu, get_link, gpus, links
from scalesim.hardware.specs import PRECISIONS, GpuSpec, LinkSpec

__all__ = ["GpuSpec", "LinkSpec", "PRECISIONS", "get_gpu", "get_link", "gpus", "links"]
