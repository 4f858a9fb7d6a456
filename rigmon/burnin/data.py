"""Training data with a known answer: a seeded, sparse random Markov chain over tokens.

Each token has ``fanout`` possible successors with random probabilities, so the best
possible next-token loss is the chain's entropy rate, computed exactly here. Training
that does not approach it points at wrong arithmetic, not at a hard dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MarkovChain:
    successors: torch.Tensor  # [states, fanout] token ids
    cumulative: torch.Tensor  # [states, fanout] cumulative probabilities
    stationary: torch.Tensor  # [states]
    entropy_rate: float  # nats per token: the loss floor

    @property
    def states(self) -> int:
        return self.successors.shape[0]

    @classmethod
    def build(cls, states: int, fanout: int, seed: int = 1234, concentration: float = 0.5) -> MarkovChain:
        g = torch.Generator().manual_seed(seed)
        successors = torch.stack([torch.randperm(states, generator=g)[:fanout] for _ in range(states)])
        gamma = torch._standard_gamma(torch.full((states, fanout), concentration, dtype=torch.float64), generator=g)
        probs = gamma / gamma.sum(dim=1, keepdim=True)
        probs = probs.clamp_min(1e-6)
        probs = probs / probs.sum(dim=1, keepdim=True)
        # stationary distribution by power iteration on the sparse transition matrix
        pi = torch.full((states,), 1.0 / states, dtype=torch.float64)
        for _ in range(5000):
            nxt = torch.zeros_like(pi).index_add_(0, successors.reshape(-1), (pi[:, None] * probs).reshape(-1))
            # a little teleportation keeps the chain ergodic even if the random graph is not
            nxt = 0.999 * nxt + 0.001 / states
            if torch.max(torch.abs(nxt - pi)) < 1e-13:
                pi = nxt
                break
            pi = nxt
        row_entropy = -(probs * probs.log()).sum(dim=1)
        entropy = float((pi * row_entropy).sum())
        return cls(successors, probs.cumsum(dim=1).float(), pi.float(), entropy)

    def to(self, device) -> MarkovChain:
        return MarkovChain(
            self.successors.to(device), self.cumulative.to(device), self.stationary.to(device), self.entropy_rate
        )

    def sample(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """[batch, length] token ids, each row a walk of the chain from its stationary law."""
        device = self.successors.device
        out = torch.empty((batch, length), dtype=torch.long, device=device)
        out[:, 0] = torch.multinomial(self.stationary, batch, replacement=True, generator=generator)
        draws = torch.rand((batch, length), device=device, generator=generator)
        last = self.cumulative.shape[1] - 1
        for t in range(1, length):
            current = out[:, t - 1]
            choice = torch.searchsorted(self.cumulative[current], draws[:, t : t + 1].contiguous()).clamp_max(last)
            out[:, t] = self.successors[current, choice.squeeze(1)]
        return out
