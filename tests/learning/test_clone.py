"""clone_module: a true copy of a module, faster than deepcopy for plain modules."""

from __future__ import annotations

import torch
from torch import nn

from p2pfl.learning.clone import clone_module, is_plain
from p2pfl.learning.models import CNN32, MLP


def test_a_clone_has_the_same_values_in_new_tensors_and_the_same_outputs():
    torch.manual_seed(0)
    for model, x in ((MLP(16, 3, 8), torch.rand(4, 16)), (CNN32(10, hidden=8), torch.rand(2, 3, 32, 32))):
        twin = clone_module(model)
        a, b = model.state_dict(), twin.state_dict()
        assert list(a) == list(b)
        assert all(torch.equal(a[k], b[k]) and a[k].data_ptr() != b[k].data_ptr() for k in a)
        model.eval()
        twin.eval()
        assert torch.equal(model(x), twin(x))
        with torch.no_grad():
            next(twin.parameters()).add_(1.0)
        assert not torch.equal(next(twin.parameters()), next(model.parameters()))
        assert all(isinstance(p, nn.Parameter) for p in twin.parameters())


def test_what_it_cannot_copy_plainly_goes_to_deepcopy():
    hooked = MLP(4, 2, 3)
    calls = []
    hooked.register_forward_hook(lambda m, i, o: calls.append(1))
    assert not is_plain(hooked)
    twin = clone_module(hooked)
    twin(torch.rand(1, 4))
    assert calls == [1]  # deepcopy kept the hook
    tied = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    tied[1].weight = tied[0].weight
    copy_ = clone_module(tied)
    assert copy_[0].weight is copy_[1].weight  # still tied, as deepcopy keeps it
    holder = MLP(4, 2, 3)
    holder.extra = torch.zeros(2)  # a tensor in a plain attribute
    assert not is_plain(holder) and clone_module(holder).extra is not holder.extra
