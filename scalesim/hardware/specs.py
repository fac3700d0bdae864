"""Frozen specs for GPUs and links. SI units inside; the catalog YAML is parsed once."""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.errors import InputError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model. All FLOP/s are DENSE peaks (never 2:4 sparse).

    fp16/bf16 are the rates with FP32 accumulate, which is what mixed-precision
    training uses (half the FP16-accumulate rate on GeForce cards).
    """

    name: str                      # catalog id, e.g. "rtx4090"
    full_name: str                 # "NVIDIA GeForce RTX 4090"
    arch: str                      # ampere | ada | hopper | blackwell
    fp32_flop_per_s: float         # non-tensor FP32
    tf32_flop_per_s: float         # TF32 tensor (equals fp32 where no TF32 speed-up)
    fp16_flop_per_s: float         # FP16 tensor, FP32 accumulate
    bf16_flop_per_s: float         # BF16 tensor, FP32 accumulate
    fp8_flop_per_s: float | None   # None where the GPU has no FP8 tensor cores
    int8_op_per_s: float | None
    memory_bytes: float
    memory_bw_bytes_per_s: float
    nvlink: str | None             # link catalog name of its NVLink port (None: no NVLink)
    nvlink_max_gpus: int           # GPUs one NVLink domain can join (2 for bridges, 0 if none)
    pcie: str                      # link catalog name, e.g. "pcie-gen4"
    pcie_p2p: bool                 # peer-to-peer over PCIe works with the stock driver
    tdp_w: float
    idle_w: float                  # draw when idle, used for energy
    ecc: bool | None               # None when unknown
    mig: bool
    list_price_usd: float | None
    cloud_usd_per_gpu_hour: float | None   # typical (midpoint of the catalog range)
    gemm_efficiency: float         # achieved fraction of dense peak on large GEMMs
    memory_bw_efficiency: float    # achieved fraction of memory bandwidth on streaming kernels
    source: tuple[str, ...]
    sms: int = 0                   # streaming multiprocessors (GEMM wave quantization)
    fp8_gemm_efficiency: float | None = None   # achieved fraction of the FP8 peak [gemm_efficiency]
    fp32_gemm_efficiency: float | None = None  # achieved fraction of the non-tensor FP32 peak [gemm_efficiency]
    sm_clock_hz: float = 0.0       # SM boost clock (datasheet); 0 where unknown
    # SM clock a power-limited part sustains under a training step (tensor cores, HBM
    # and links busy at once) as a fraction of the clock its GEMM benchmarks ran at.
    training_clock_fraction: float = 1.0
    # Bytes an SM issues per clock in framework memory-bound kernels; None: the global figure
    # in scalesim/costs/compute.py (STREAM_BYTES_PER_SM_CYCLE). Set per GPU only by a catalog
    # overlay (e.g. validate's leave-one-source-out refit).
    stream_bytes_per_sm_cycle: float | None = None
    # A GEMM output tile's fixed cost (operand pipeline fill, epilogue) as the reduction depth K its
    # main loop covers in the same time: depth-K GEMMs run at K/(K+K0) of the deep-K rate
    # (scalesim/costs/gemm_depth.py). 0 where not measured (no depth effect modelled).
    gemm_k_overhead: float = 0.0
    # Achieved fraction of memory bandwidth on a kernel that only reads (BabelStream's Dot: two
    # arrays in, one number out), where measured; None: memory_bw_efficiency (a copy's).
    read_bw_efficiency: float | None = None

    @property
    def read_bw_bytes_per_s(self) -> float:
        """Rate of a read-only stream (decode attention's keys and values): the measured read
        figure where the catalog has one, never below the copy figure."""
        return self.memory_bw_bytes_per_s * max(self.memory_bw_efficiency, self.read_bw_efficiency or 0.0)

    def gemm_efficiency_for(self, precision: str) -> float:
        if precision == "fp8" and self.fp8_gemm_efficiency is not None:
            return self.fp8_gemm_efficiency
        if precision == "fp32" and self.fp32_gemm_efficiency is not None:
            return self.fp32_gemm_efficiency
        return self.gemm_efficiency

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak for a training precision; InputError where the GPU lacks it."""
        table = {
            "fp32": self.fp32_flop_per_s,
            "tf32": self.tf32_flop_per_s,
            "fp16": self.fp16_flop_per_s,
            "bf16": self.bf16_flop_per_s,
            "fp8": self.fp8_flop_per_s,
        }
        if precision not in table:
            raise InputError(f"unknown precision '{precision}'; allowed: {', '.join(PRECISIONS)}")
        value = table[precision]
        if value is None:
            raise InputError(f"{self.full_name} has no {precision} tensor cores; "
                             f"use one of: {', '.join(p for p in PRECISIONS if table[p])}")
        return value


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """One link technology. Bandwidth is PER DIRECTION (links are full duplex).

    For NVLink the figure is a GPU's whole NVLink port (e.g. H100: 18 links x
    25 GB/s = 450 GB/s each way), since node designs attach a GPU to its
    NVSwitch fabric as one port. `efficiency` is the fraction of line rate a
    bulk transfer (NCCL bus bandwidth) reaches on it.

    Kind `memory` is host DRAM used to stage GPU-to-GPU copies without P2P: its
    bandwidth is the socket's total (reads and writes share it, half duplex) and
    its efficiency the STREAM-measured fraction.
    """

    name: str                      # catalog id, e.g. "pcie-gen4", "nvlink4", "ib-ndr"
    kind: str                      # pcie | nvlink | nvswitch | socket | infiniband | roce | ethernet | memory
    bw_bytes_per_s: float          # per direction
    latency_s: float               # one hop, one way
    efficiency: float              # achieved fraction of bw_bytes_per_s for bulk transfers
    description: str
    source: tuple[str, ...]
    in_network_reduction: bool = False   # NVSwitch with NVLink SHARP (NVLS)
    # Network links reached through an NCCL net plugin (AWS EFA: aws-ofi-nccl): the latency the plugin
    # reports to NCCL (ncclNetProperties_t.latency), which NCCL 2.18+ adds to every inter-node step of
    # its latency model (collectives/protocol.py). NCCL's built-in IB/RoCE and socket transports report 0.
    net_plugin_latency_s: float = 0.0
    # NVSwitch with NVLS: the NVLS kernel's pipeline fill, in loops of nChannels x nHeads x chunkSize bytes
    # (scalesim/collectives/nvls.py pipeline_fill_s); 0 for every other link.
    nvls_pipeline_fill: float = 0.0

    @property
    def effective_bw_bytes_per_s(self) -> float:
        return self.bw_bytes_per_s * self.efficiency
