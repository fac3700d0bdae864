"""Is a GB200 GPU faster than a B200 in a training step? Same-software pairs, measured vs predicted.

    python validation/gb200_b200_pairs.py            # prints the table (about a minute)

Each pair is one publisher's run of one plan on both systems with one software release (GB300 / B300
likewise). The GB200 (GB300) side is a validation scenario or a copy of one; its B200 (B300) twin is
the same file on DGX B200 nodes (`hgx-b200`, with `gpu: b300` for B300), written to a temporary
folder: the twins are not validation cases, only the ratio is looked at. Measured ratio = GB200
throughput per GPU / B200's; predicted = B200 step time / GB200's. Notes: validation/gb200-vs-b200-notes.md.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCEN = ROOT / "validation" / "scenarios"
BRIDGE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary"
B200_NODES = {"node": "hgx-b200", "nodes": 16, "fabric": {"link": "ib-ndr", "nics_per_node": 8, "topology": "fat-tree"}}

# (label, GB200-side scenario, its edits, B200-side node, measured GB200/B200 ratios, where measured)
PAIRS = [
    ("Llama 3.1 405B MXFP8, 128 GPUs, TP4 PP8 CP2 VP8, GBS 64", "dgxc-llama3.1-405b-fp8-128xgb200.yaml",
     {"fp8_recipe": "transformer-engine-mxfp8"}, B200_NODES, (578 / 622, 563 / 624),
     f"{BRIDGE}.md @2b8806b9, 25.09 and 25.11 (GB200 vs DGX-B200 FP8-MX rows)"),
    ("Qwen3-30B-A3B MXFP8, 8 GPUs, EP8, MBS 4", "mbridge-qwen3-30b-a3b-fp8-8xgb200.yaml", {},
     {"node": "hgx-b200", "gpus": 8}, (26373 / 26695, 26032 / 26859, 26112 / 27136),
     f"{BRIDGE}-archive.md @4ab94dfa, 26.02.01 / 26.04 / 26.04.01"),
    ("Llama 2 70B LoRA FP8, 8 GPUs (MLPerf v5.0)", "mlperf-v5.0-nvidia-8xgb200-llama2-70b-lora.yaml", {},
     {"node": "hgx-b200", "gpus": 8}, (5.3822 / 5.2886,),
     "mlcommons/training_results_v5.0 NVIDIA tyche_ngpu8 vs nyx_n1 (ngc25.04_nemo), median samples/s"),
    ("BERT-large, 8 GPUs, GBS 384 (MLPerf v5.0)", "mlperf50-nvidia-8xgb200-bert-large-gb384.yaml", {},
     "mlperf50-nvidia-8xb200-bert-large-gb384.yaml", (0.06248 / 0.06113,),
     "mlcommons/training_results_v5.0 NVIDIA tyche_ngpu8 vs nyx_n1 (ngc25.04_pytorch), step time"),
    ("GB300/B300: Qwen3-30B-A3B MXFP8, 8 GPUs, EP8, MBS 8", "mbridge-qwen3-30b-a3b-fp8-8xgb200.yaml",
     {"micro_batch": 8, "node": "gb300-nvl72"}, "b300", (30376 / 29521, 30411 / 29454, 31470 / 30553, 31744 / 30720,
                                                          45275 / 40769),
     f"{BRIDGE}-archive.md @4ab94dfa, 26.02 to 26.06"),
]


def gb_side(name: str, edits: dict) -> dict:
    data = yaml.safe_load((SCEN / name).read_text())
    training, parallel = data["training"], data["parallel"]
    if "fp8_recipe" in edits:                       # MXFP8 gathers bf16 parameters (no fp8_param_gather)
        training["fp8_recipe"] = edits["fp8_recipe"]
        parallel.pop("fp8_param_gather", None)
    if "micro_batch" in edits:
        training["micro_batch"] = edits["micro_batch"]
    if "node" in edits:
        data["cluster"] = {"node": edits["node"], "gpus": data["cluster"]["gpus"]}
    return data


def b_side(gb: dict, node) -> dict:
    if isinstance(node, str) and node.endswith(".yaml"):
        return yaml.safe_load((SCEN / node).read_text())
    data = copy.deepcopy(gb)
    if node == "b300":                              # DGX B300 modelled as the HGX B200 board with B300 GPUs
        design = yaml.safe_load((ROOT / "topologies" / "hgx-b200.yaml").read_text())
        design.update(name="hgx-b300", gpu="b300")
        node = {"node": design, "gpus": gb["cluster"]["gpus"]}
    data["cluster"] = node
    return data


def step_time(data: dict, folder: Path, stem: str) -> float:
    path = folder / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = subprocess.run([sys.executable, "-m", "scalesim", "run", str(path), "--json", "--max-seconds", "86400"],
                         capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)["step_time_s"]       # exit 3 (does not fit) still prints the step


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{'pair':58s} {'predicted':>9s}  measured")
        for i, (label, name, edits, node, measured, where) in enumerate(PAIRS):
            gb = gb_side(name, edits)
            ratio = step_time(b_side(gb, node), folder, f"b{i}") / step_time(gb, folder, f"gb{i}")
            shown = " / ".join(f"{m:.3f}" for m in measured)
            print(f"{label:58s} {ratio:9.3f}  {shown}   [{where}]")


if __name__ == "__main__":
    main()
