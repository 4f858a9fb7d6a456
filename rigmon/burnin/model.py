"""A GPT-style decoder: pre-norm blocks, PyTorch's scaled-dot-product attention, tied
embeddings. Sizes from a tiny CPU model to GPT-2 small (124M parameters)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    name: str
    vocab: int
    layers: int
    heads: int
    width: int
    context: int
    batch: int  # sequences per step per GPU

    def parameters(self) -> int:
        per_layer = 12 * self.width**2 + 13 * self.width
        return self.vocab * self.width + self.context * self.width + self.layers * per_layer + 2 * self.width

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 per parameter plus attention (PaLM's appendix B)."""
        non_embedding = self.parameters() - self.vocab * self.width - self.context * self.width
        return 6 * (non_embedding + self.vocab * self.width) + 12 * self.layers * self.width * self.context


MODELS = {
    "tiny": GPTConfig("tiny", vocab=256, layers=2, heads=4, width=128, context=64, batch=16),
    "small": GPTConfig("small", vocab=8192, layers=6, heads=6, width=384, context=512, batch=16),
    "gpt2": GPTConfig("gpt2", vocab=50304, layers=12, heads=12, width=768, context=1024, batch=32),
}


def choose(name: str, device: torch.device) -> GPTConfig:
    """``auto``: GPT-2 small on GPUs with 16 GB or more, a smaller model below, tiny on the CPU."""
    if name != "auto":
        return MODELS[name]
    if device.type != "cuda":
        return MODELS["tiny"]
    memory = torch.cuda.get_device_properties(device).total_memory
    if memory >= 16e9:
        return MODELS["gpt2"]
    if memory >= 6e9:
        return MODELS["small"]
    return MODELS["tiny"]


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.heads = c.heads
        self.norm1 = nn.LayerNorm(c.width)
        self.qkv = nn.Linear(c.width, 3 * c.width)
        self.proj = nn.Linear(c.width, c.width)
        self.norm2 = nn.LayerNorm(c.width)
        self.up = nn.Linear(c.width, 4 * c.width)
        self.down = nn.Linear(4 * c.width, c.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(w, dim=2)
        q, k, v = (z.view(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.tokens = nn.Embedding(c.vocab, c.width)
        self.positions = nn.Embedding(c.context, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
