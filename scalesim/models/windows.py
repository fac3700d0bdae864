"""Sliding-window attention of the zoo's models: (window in keys, every n-th block full, 0: none).

`models/packing.py` sliding_window applies them; `costs/flash.py` window_share prices what a flash kernel
runs of them. Each is what the model's Hugging Face config.json sets and what Hugging Face transformers
passes to its attention (`sliding_window=...`): FlashAttention-2 skips the key tiles outside the window;
eager and SDPA attention turn it into a mask and do all the work (costs/compute.py).

No window: Mixtral 8x7B and 8x22B v0.1 (config.json sliding_window null), Qwen2.5 (use_sliding_window
false), Llama 2/3, Qwen3, DeepSeek-V3. Llama 4's chunked attention is not a sliding window (not modelled).
"""

from __future__ import annotations

SLIDING_WINDOWS: dict[str, tuple[int, int]] = {
    # sliding_window 128, layer_types sliding / full alternating from layer 0 (Megatron Bridge
    # GPTOSSProvider window_size (128, 0), window_attn_skip_freq 2)
    "gpt-oss-20b": (128, 2),
    "gpt-oss-120b": (128, 2),
    # Mistral 7B v0.1: sliding_window 4096 in every layer (Jiang et al. 2023, Table 1: window_size 4096,
    # context_len 8192; mistralai/Mistral-7B-v0.1 config.json). v0.2 and later set sliding_window null
    # (mistralai/Mistral-7B-Instruct-v0.2 and -v0.3 config.json).
    "mistral-7b": (4096, 0),
    # Gemma 2: 4096-token local windows in every other layer from the first (Gemma Team 2024, sec. 2:
    # local sliding-window and global attention alternate, local window 4096 tokens, global span 8192;
    # huggingface/transformers src/transformers/models/gemma2/modular_gemma2.py @213da5a0,
    # Gemma2Attention `sliding_window = config.sliding_window if not bool(layer_idx % 2)`: layer 0 local;
    # later versions' default layer_types, "sliding_attention" if bool((i + 1) % 2), say the same)
    "gemma2-9b": (4096, 2),
    "gemma2-27b": (4096, 2),
    # Phi-3 mini 4k: sliding_window 2047 in every layer (microsoft/Phi-3-mini-4k-instruct config.json;
    # transformers src/transformers/models/phi3/modular_phi3.py @2b6c089d, Phi3Attention passes
    # sliding_window=config.sliding_window to every layer's attention)
    "phi-3-mini": (2047, 0),
}
