"""RND networks, training and novelty (RND clustered-FL paper, Sec. RND)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from p2pfl.clustering import (
    fit_predictor,
    make_predictor,
    make_target,
    novelties,
    novelty,
    novelty_matrix,
    novelty_row,
    rnd_flops,
    target_embedding,
    train_predictor,
)
from p2pfl.clustering.rnd import (
    SCORE_GROUP,
    STACK_ATOL,
    UNFOLD_ATOL,
    MaxPool2x2,
    UnfoldConv2d,
    _grouped_novelties,
    _scores_in_groups,
    fitted_predictor,
    fitted_predictors,
    state_novelties,
)
from p2pfl.seeding import child_seed, stream, torch_generator
from p2pfl.sim.cost import forward_flops_per_sample


def _images(seed: int, n: int, kind: str) -> torch.Tensor:
    """Synthetic 1x28x28 images: A = soft blobs; B = the same blobs plus a stripe pattern and noise."""
    rng = stream(seed, "test.images", 0 if kind == "A" else 1)
    yy, xx = np.mgrid[0:28, 0:28]
    cy, cx = rng.uniform(8, 20, size=(2, n))
    blobs = np.exp(-((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2) / 20.0)
    if kind == "B":
        blobs = blobs + 0.4 * (xx[None] % 4 < 2) + 0.1 * rng.standard_normal(blobs.shape)
    return torch.from_numpy(np.clip(blobs, 0, 1).astype(np.float32))[:, None]


def test_layer_lists_match_authors_code():
    t, p = make_target(1, seed=0), make_predictor(1, seed=0)
    assert [type(m).__name__ for m in t] == [
        "UnfoldConv2d", "ReLU", "MaxPool2x2", "Conv2d", "ReLU", "AdaptiveAvgPool2d", "Flatten", "Linear"]
    assert isinstance(t[2], nn.MaxPool2d) and t[2].kernel_size == 2  # counted as these by the cost model
    assert isinstance(t[0], nn.Conv2d) and type(p[0]) is nn.Conv2d
    assert (t[0].out_channels, t[3].out_channels, t[7].in_features, t[7].out_features) == (32, 64, 1024, 64)
    assert (p[0].out_channels, p[3].out_channels, p[7].in_features, p[7].out_features) == (2, 4, 64, 64)
    assert sum(q.numel() for q in p.parameters()) == 20 + 76 + 4160
    assert all(not q.requires_grad for q in t.parameters()) and not t.training
    assert all(q.requires_grad for q in p.parameters())
    assert all(float(m.bias.abs().sum()) == 0.0 for m in t if isinstance(m, (nn.Conv2d, nn.Linear)))


def test_vector_inputs_pick_the_mlp_by_rank():
    t, p = make_target((10,), seed=0), make_predictor((10,), seed=0)
    assert [m.out_features for m in t if isinstance(m, nn.Linear)] == [128, 64]
    assert [m.out_features for m in p if isinstance(m, nn.Linear)] == [16, 64]
    assert isinstance(make_target((3, 8, 8), seed=0)[0], nn.Conv2d) and make_target((3, 8, 8), seed=0)[0].in_channels == 3
    x = torch.rand(40, 10)
    loss = train_predictor(p, t, x, epochs=2, batch_size=16, generator=torch_generator(0, "t"))
    assert np.isfinite(loss) and novelty(p, t, x) > 0


def test_kaiming_init_scale():
    t = make_target(1, seed=3)
    w = t[3].weight  # Conv(32->64, 3x3): fan_in 288, std sqrt(2/288)
    assert abs(float(w.std()) - (2 / 288) ** 0.5) < 0.006


def test_same_seed_same_weights_and_same_trained_predictor():
    x = _images(0, 64, "A")
    t1, t2 = make_target(1, seed=7), make_target(1, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(t1.state_dict().values(), t2.state_dict().values()))
    assert not torch.equal(make_target(1, seed=8)[0].weight, t1[0].weight)
    runs = []
    for _ in range(2):
        p = make_predictor(1, seed=7)
        loss = train_predictor(p, t1, x, epochs=2, batch_size=16, generator=torch_generator(7, "rnd.shuffle", 0))
        runs.append((p, loss))
    (p1, l1), (p2, l2) = runs
    assert l1 == l2
    assert all(torch.equal(a, b) for a, b in zip(p1.state_dict().values(), p2.state_dict().values()))
    # the training stream matters: another shuffling gives other weights
    p3 = make_predictor(1, seed=7)
    train_predictor(p3, t1, x, epochs=2, batch_size=16, generator=torch_generator(7, "rnd.shuffle", 1))
    assert not torch.equal(p3[7].weight, p1[7].weight)


def _weights(net: nn.Module) -> list[torch.Tensor]:
    return [v for k, v in net.state_dict().items() if k.endswith("weight")]


def test_per_device_predictors_are_each_devices_own_and_the_shared_one_is_the_node_free_stream():
    """``node=i``: device i's own initial predictor (the authors' code seeds each device's); ``node=None``: the
    shared one, drawn from the stream ``rnd.predictor`` of the seed as before ``node`` existed."""
    for shape in (1, (1, 8, 8), (12,)):
        own = [make_predictor(shape, seed=3, node=i) for i in range(4)]
        for i in range(4):
            again = make_predictor(shape, seed=3, node=i)
            assert all(torch.equal(a, b) for a, b in zip(_weights(own[i]), _weights(again)))
            for j in range(i):  # every weight tensor differs between any two devices
                assert not any(torch.equal(a, b) for a, b in zip(_weights(own[i]), _weights(own[j])))
        shared = make_predictor(shape, seed=3)
        assert not any(torch.equal(a, b) for p in own for a, b in zip(_weights(p), _weights(shared)))
        assert not torch.equal(_weights(make_predictor(shape, seed=4, node=0))[0], _weights(own[0])[0])
    # the shared predictor is the node-free stream: its first layer as drawn by hand from that stream
    g = torch.Generator()
    g.manual_seed(child_seed(3, "rnd.predictor"))
    first = torch.empty(2, 1, 3, 3)
    nn.init.kaiming_normal_(first, nonlinearity="relu", generator=g)
    assert torch.equal(make_predictor(1, seed=3)[0].weight, first)
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="'node' parameter must be a device id"):
            make_predictor(1, seed=3, node=bad)  # type: ignore[arg-type]


def test_novelty_is_lower_on_the_training_distribution():
    """A predictor fitted on A explains held-out A better than one fitted on B, and vice versa."""
    t = make_target(1, seed=0)
    a, a_test = _images(0, 200, "A"), _images(10, 100, "A")
    b, b_test = _images(0, 200, "B"), _images(10, 100, "B")
    p_a, p_b = make_predictor(1, seed=0), make_predictor(1, seed=0)
    before = novelty(p_a, t, a_test)
    train_predictor(p_a, t, a, epochs=3, batch_size=16, generator=torch_generator(0, "shuffle", 0))
    train_predictor(p_b, t, b, epochs=3, batch_size=16, generator=torch_generator(0, "shuffle", 1))
    u_aa, u_ab = novelty(p_a, t, a_test), novelty(p_b, t, a_test)  # data A, predictor A / B
    u_bb, u_ba = novelty(p_b, t, b_test), novelty(p_a, t, b_test)
    assert u_aa < 0.8 * before
    assert u_aa < 0.97 * u_ab  # measured 7.3 vs 7.9
    assert u_bb < 0.8 * u_ba  # measured 38.7 vs 52.9
    assert u_ba > 5 * u_aa  # A's predictor finds B novel


def test_novelty_is_mean_of_per_sample_sum_of_squares():
    t, p = make_target((5,), seed=1), make_predictor((5,), seed=2)
    x = torch.rand(7, 5)
    with torch.no_grad():
        expected = float(((p(x) - t(x)) ** 2).sum(dim=1).double().mean())
    assert novelty(p, t, x) == pytest.approx(expected, rel=1e-6)
    ps = [make_predictor((5,), seed=s) for s in range(3)]
    row = novelty_row(ps, t, x)
    assert row.shape == (3,) and row.dtype == np.float64
    assert row.tolist() == [novelty(q, t, x) for q in ps]


def test_novelty_matrix_orientation_and_unscored_pairs():
    t = make_target((4,), seed=0)
    ps = [make_predictor((4,), seed=s) for s in range(3)]
    xs = [torch.rand(5, 4, generator=torch_generator(0, "x", i)) for i in range(3)]
    U = novelty_matrix(ps, t, xs)
    assert U[2, 0] == novelty(ps[0], t, xs[2])  # row = data owner, column = predictor
    scored = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    P = novelty_matrix(ps, t, xs, scored=scored)
    assert np.isnan(P[0, 2]) and np.isnan(P[2, 0])
    assert np.array_equal(P[~np.isnan(P)], U[~np.isnan(P)]) and not np.isnan(np.diag(P)).any()


def test_bad_inputs_are_rejected_with_clear_messages():
    t, p = make_target(1, seed=0), make_predictor(1, seed=0)
    g = torch_generator(0, "x")
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        novelty(p, t, torch.full((2, 1, 8, 8), 2.0))
    with pytest.raises(ValueError, match=r"shape \(N, 1, H, W\)"):
        novelty(p, t, torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="'epochs' parameter must be an int >= 1; got 0"):
        train_predictor(p, t, torch.rand(2, 1, 8, 8), epochs=0, generator=g)
    with pytest.raises(ValueError, match="'lr' parameter"):
        train_predictor(p, t, torch.rand(2, 1, 8, 8), lr=-1.0, generator=g)
    with pytest.raises(ValueError, match="in_shape"):
        make_target((1, 8), seed=0)
    with pytest.raises(ValueError, match="disagree"):
        novelty(make_predictor((4,), seed=0), t, torch.rand(2, 4))


def test_rnd_flops_formula():
    shape = (1, 28, 28)
    fp = forward_flops_per_sample(make_predictor(shape, seed=0), shape)
    ft = forward_flops_per_sample(make_target(shape, seed=0), shape)
    assert (fp, ft) == (71760, 7920960)  # pinned: predictor ~110x cheaper than the target
    assert rnd_flops(shape, 500, embed=True) == 500 * ft
    assert rnd_flops(shape, 500, epochs=10) == 500 * 10 * 3 * fp
    assert rnd_flops(shape, 500, n_scored=12) == 500 * 12 * fp
    assert rnd_flops(shape, 500, embed=True, epochs=10, n_scored=12) == 500 * (ft + 30 * fp + 12 * fp)
    assert rnd_flops(shape, 500) == 0
    assert rnd_flops((64,), 10, embed=True, epochs=1, n_scored=1) == 10 * (33088 + 3 * 4192 + 4192)


@pytest.mark.parametrize("hw", [(28, 28), (9, 7)])
def test_max_pool_2x2_gives_max_pool2d_values(hw):
    x = torch.relu(torch.randn(6, 3, *hw, generator=torch_generator(0, "pool", *hw)))
    with torch.no_grad():  # scoring and embedding: the four strided views
        fast = MaxPool2x2()(x)
    assert fast.shape == (6, 3, hw[0] // 2, hw[1] // 2) and torch.equal(fast, nn.MaxPool2d(2)(x))
    assert torch.equal(MaxPool2x2()(x.requires_grad_()), nn.MaxPool2d(2)(x))  # training: max_pool2d itself


def test_fitting_against_a_cached_embedding_is_training_against_the_target():
    t = make_target(1, seed=3)
    x = _images(0, 40, "A")
    fx = target_embedding(t, x)
    assert fx.shape == (40, 64) and torch.equal(fx, t(x).detach())
    p1, p2 = make_predictor(1, seed=3), make_predictor(1, seed=3)
    l1 = train_predictor(p1, t, x, epochs=2, batch_size=16, generator=torch_generator(0, "s"))
    l2 = fit_predictor(p2, x, fx, epochs=2, batch_size=16, generator=torch_generator(0, "s"))
    assert l1 == l2 and all(torch.equal(a, b) for a, b in zip(p1.state_dict().values(), p2.state_dict().values()))
    ps = [p1, make_predictor(1, seed=4)]
    assert novelties(ps, x, fx).tolist() == novelty_row(ps, t, x).tolist() == [novelty(q, t, x) for q in ps]
    template = make_predictor(1, seed=99)  # its weights are never used, only its layers
    assert state_novelties(template, [q.state_dict() for q in ps], x, fx).tolist() == novelties(ps, x, fx).tolist()
    with pytest.raises(ValueError, match=r"'fx' parameter must be the target's embedding of x, shape \(40, 64\); "
                                         r"got \(39, 64\)"):
        novelties(ps, x, fx[:39])


@pytest.mark.parametrize("threads", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_one_channel_images_score_as_the_loop_and_groups_come_close(threads):
    torch.set_num_threads(threads)
    try:
        t = make_target(1, seed=0)
        n = 550 if threads == 1 else 60  # 1,100 images at one thread: two sample batches
        x = torch.cat([_images(s, n, "AB"[s]) for s in range(2)])
        fx = target_embedding(t, x)
        ps = [make_predictor(1, seed=k) for k in range(2 * SCORE_GROUP + 3)]  # two whole groups and a part
        for k in (0, 5, 17):
            ps[k] = fitted_predictor(ps[k], x[:64], fx[:64], 2, 16, 1e-3, torch_generator(0, "g", k))
        template = make_predictor(1, seed=99)
        states = [q.state_dict() for q in ps]
        assert _scores_in_groups(template, x)
        loop = novelties(ps, x, fx).tolist()  # each a module's own forward
        assert len(set(loop)) == len(ps)
        assert state_novelties(template, states, x, fx).tolist() == loop  # the loop's bits: scores run the loop
        # grouped (1,100 images: groups of 1, 6.4 MB of maps each; 120: of 8): the loop's bits on some CPUs, not all
        assert np.allclose(_grouped_novelties(template, states, x, fx, group=5), loop, rtol=1e-6, atol=0)  # 5, 5, 5, 4
        assert np.allclose(_grouped_novelties(template, states, x, fx), loop, rtol=1e-6, atol=0)
        assert state_novelties(template, states, x[:100], fx[:100]).tolist() == novelties(ps, x[:100], fx[:100]).tolist()
        rgb = torch.rand(5, 3, 12, 12)  # three channels: the loop
        assert not _scores_in_groups(make_predictor((3, 12, 12), seed=0), rgb)
    finally:
        torch.set_num_threads(1)


def test_stacked_fits_are_within_tolerance_of_the_loop():
    t = make_target(1, seed=0)
    xs = [_images(s, 30, "AB"[s % 2]) for s in range(5)]
    fxs = [target_embedding(t, x) for x in xs]

    def calls() -> list[tuple]:
        return [(make_predictor(1, seed=0), x, fx, 4, 8, 1e-3, torch_generator(0, "fit", i))
                for i, (x, fx) in enumerate(zip(xs, fxs))]

    loop = [fitted_predictor(*c) for c in calls()]  # 16 Adam steps each
    stacked = fitted_predictors(calls())
    assert STACK_ATOL == 1e-4
    worst = max(float((a - b).detach().abs().max()) for p, q in zip(loop, stacked)
                for a, b in zip(p.parameters(), q.parameters()))
    assert 0 < worst <= STACK_ATOL  # not the same bits (grouped convolutions), within the stated tolerance
    assert all(not q.training for q in stacked)
    moved = float((stacked[0][0].weight - make_predictor(1, seed=0)[0].weight).detach().abs().max())
    assert moved > 100 * STACK_ATOL  # the tolerance is small against what training changes
    with pytest.raises(ValueError, match="share the predictor architecture, data shape and settings"):
        fitted_predictors([calls()[0], (*calls()[1][:3], 5, *calls()[1][4:])])


def test_stacked_fits_start_from_each_devices_own_initial_predictor():
    """With per-device initial predictors the stacked fit is the loop's (within ``STACK_ATOL``) from each
    device's own start, not from a shared one."""
    t = make_target(1, seed=0)
    xs = [_images(s, 30, "AB"[s % 2]) for s in range(4)]
    fxs = [target_embedding(t, x) for x in xs]

    def calls(node: bool) -> list[tuple]:
        return [(make_predictor(1, seed=0, node=i if node else None), x, fx, 4, 8, 1e-3, torch_generator(0, "fit", i))
                for i, (x, fx) in enumerate(zip(xs, fxs))]

    loop = [fitted_predictor(*c) for c in calls(True)]
    stacked = fitted_predictors(calls(True))
    worst = max(float((a - b).detach().abs().max()) for p, q in zip(loop, stacked)
                for a, b in zip(p.parameters(), q.parameters()))
    assert worst <= STACK_ATOL
    from_shared = fitted_predictors(calls(False))
    apart = min(max(float((a - b).detach().abs().max()) for a, b in zip(p.parameters(), q.parameters()))
                for p, q in zip(stacked, from_shared))
    assert apart > 100 * STACK_ATOL  # each device's own start carried through: far from the shared start's fit


def test_unfold_conv_is_the_convolution_under_no_grad():
    t = make_target(1, seed=5)
    assert type(t[0]) is UnfoldConv2d and type(make_predictor(1, seed=5)[0]) is nn.Conv2d
    conv = nn.Conv2d(1, 32, 3, padding=1)
    conv.load_state_dict(t[0].state_dict())
    x = _images(1, 20, "B")
    with torch.no_grad():
        fast, plain = t[0](x), conv(x)
    assert fast.shape == plain.shape == (20, 32, 28, 28)
    assert float((fast - plain).abs().max()) <= UNFOLD_ATOL
