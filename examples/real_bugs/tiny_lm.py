"""The model and data of the corpus' plain-PyTorch trainers (lightning_tiny.py, accelerate_tiny.py):
a one-block language model and synthetic full-length token sequences from a generator of their
own (the model's random numbers are not touched); nothing is downloaded."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64


class Net(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x + self.down(F.gelu(self.up(self.norm(x)))))


def sequences(count, seq, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, VOCAB, (count, seq), generator=g)


def next_token_loss(net, ids):
    """The mean cross entropy of each next token."""
    logits = net(ids)[:, :-1]
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
