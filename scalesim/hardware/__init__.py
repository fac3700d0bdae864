"""Hardware catalog: GPUs and links, each with its datasheet source."""

from scalesim.hardware.catalog import catalog_notes, get_gpu, get_link, gpus, links
from scalesim.hardware.specs import PRECISIONS, GpuSpec, LinkSpec

__all__ = ["GpuSpec", "LinkSpec", "PRECISIONS", "catalog_notes", "get_gpu", "get_link", "gpus", "links"]
