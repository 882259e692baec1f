"""The ACT-style policy against independent implementations of its parts, and the demo's motion.

The backbone is checked against ResNet18 written out with ``torch.nn.functional`` in the test (and
ResNet18's parameter count), the attention and the transformer layers against ``torch.nn``'s own,
each loaded with the same weights; the whole forward against those
references put together by the test. The demo's chunk (a ramp from the present state to a reachable
pose) is worked out by hand.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from runtime.policies.act import (  # noqa: E402
    ACT_CONFIG,
    DEMO_CONFIG,
    ACTConfig,
    ACTPolicy,
    Attention,
    Backbone,
    DecoderLayer,
    EncoderLayer,
    make_act_policy,
    make_demo_policy,
)

SMALL = ACTConfig(
    image_hw=(40, 56),
    stage_channels=(8, 16),
    blocks_per_stage=2,
    dim=16,
    heads=4,
    encoder_layers=2,
    decoder_layers=2,
    feedforward=24,
    chunk_length=5,
)


def test_the_configurations_are_act_as_lerobot_ships_it_and_a_small_demo() -> None:
    assert (
        ACTConfig(
            image_hw=(480, 640),
            state_dim=6,
            action_dim=6,
            chunk_length=100,
            stage_channels=(64, 128, 256, 512),
            blocks_per_stage=2,
            dim=512,
            heads=8,
            encoder_layers=4,
            decoder_layers=1,
            feedforward=3200,
            reach_deg=0.0,
        )
        == ACT_CONFIG
    )
    assert (
        ACTConfig(
            image_hw=(96, 128),
            state_dim=6,
            action_dim=6,
            chunk_length=100,
            stage_channels=(16, 32, 64),
            blocks_per_stage=1,
            dim=64,
            heads=4,
            encoder_layers=2,
            decoder_layers=1,
            feedforward=128,
            reach_deg=40.0,
        )
        == DEMO_CONFIG
    )


def _randomize_batch_norms(module: Any) -> None:
    gen = torch.Generator().manual_seed(3)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=gen) - 0.5)


def _bn(x: Any, bn: Any) -> Any:
    F = torch.nn.functional
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, 1e-5)


def _resnet(x: Any, ours: Backbone, cfg: ACTConfig) -> Any:
    """ResNet's trunk written out: a 7x7/2 stem and max pool, then basic blocks, the first of each
    stage after the first at stride 2, a 1x1 projection where the shape changes."""
    F = torch.nn.functional
    stem_conv, stem_bn = ours.stem[0], ours.stem[1]
    x = F.max_pool2d(F.relu(_bn(F.conv2d(x, stem_conv.weight, stride=2, padding=3), stem_bn)), 3, 2, 1)
    blocks = iter(ours.stages)
    cin = cfg.stage_channels[0]
    for i, cout in enumerate(cfg.stage_channels):
        for b in range(cfg.blocks_per_stage):
            block = next(blocks)
            stride = 2 if (b == 0 and i > 0) else 1
            y = F.relu(_bn(F.conv2d(x, block.conv1.weight, stride=stride, padding=1), block.bn1))
            y = _bn(F.conv2d(y, block.conv2.weight, padding=1), block.bn2)
            if stride != 1 or cin != cout:
                x = _bn(F.conv2d(x, block.down[0].weight, stride=stride), block.down[1])
            else:
                assert isinstance(block.down, torch.nn.Identity)
            x = F.relu(y + x)
            cin = cout
    return x


def test_the_act_backbone_is_resnet18() -> None:
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        ours = Backbone(ACT_CONFIG)
    # ResNet18 has 11,689,512 parameters, of which its classifier (512 x 1000 + 1000) is not a backbone's
    assert sum(p.numel() for p in ours.parameters()) == 11_689_512 - 513_000
    assert ours.out_channels == 512
    assert len(ours.stages) == 8


def test_the_backbone_computes_resnets_trunk() -> None:
    cfg = ACTConfig(stage_channels=(8, 16, 24), blocks_per_stage=2)
    torch.manual_seed(1)
    ours = Backbone(cfg).eval()
    _randomize_batch_norms(ours)
    x = torch.rand(1, 3, 33, 47)
    with torch.no_grad():
        got, want = ours(x), _resnet(x, ours, cfg)
    assert got.shape == (1, 24, 3, 3)  # 33 x 47 at strides 2 (stem), 2 (pool), 2, 2
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_attention_is_multi_head_attention() -> None:
    torch.manual_seed(1)
    ours = Attention(16, 4).eval()
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        _mha(ours, ref)
        x, ctx = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
        torch.testing.assert_close(ours(x, ctx), ref(x, ctx, ctx, need_weights=False)[0], rtol=1e-5, atol=1e-5)


def _mha(ours: Attention, ref: Any) -> None:
    ref.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.k.weight, ours.v.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.k.bias, ours.v.bias]))
    ref.out_proj.weight.copy_(ours.out.weight)
    ref.out_proj.bias.copy_(ours.out.bias)


def _encoder_ref(ours: EncoderLayer, cfg: ACTConfig) -> Any:
    ref = torch.nn.TransformerEncoderLayer(cfg.dim, cfg.heads, cfg.feedforward, dropout=0.0, batch_first=True)
    with torch.no_grad():
        _mha(ours.att, ref.self_attn)
        ref.linear1.load_state_dict(ours.ff[0].state_dict())
        ref.linear2.load_state_dict(ours.ff[2].state_dict())
        ref.norm1.load_state_dict(ours.norm1.state_dict())
        ref.norm2.load_state_dict(ours.norm2.state_dict())
    return ref.eval()


def _decoder_ref(ours: DecoderLayer, cfg: ACTConfig) -> Any:
    ref = torch.nn.TransformerDecoderLayer(cfg.dim, cfg.heads, cfg.feedforward, dropout=0.0, batch_first=True)
    with torch.no_grad():
        _mha(ours.self_att, ref.self_attn)
        _mha(ours.cross_att, ref.multihead_attn)
        ref.linear1.load_state_dict(ours.ff[0].state_dict())
        ref.linear2.load_state_dict(ours.ff[2].state_dict())
        for k in (1, 2, 3):
            getattr(ref, f"norm{k}").load_state_dict(getattr(ours, f"norm{k}").state_dict())
    return ref.eval()


def _perturb_norms(module: Any) -> None:
    gen = torch.Generator().manual_seed(5)
    for m in module.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) - 0.5)


def test_the_encoder_and_decoder_layers_are_post_norm_transformer_layers() -> None:
    torch.manual_seed(2)
    enc, dec = EncoderLayer(SMALL).eval(), DecoderLayer(SMALL).eval()
    _perturb_norms(enc)
    _perturb_norms(dec)
    x, memory = torch.randn(1, 5, 16), torch.randn(1, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(enc(memory), _encoder_ref(enc, SMALL)(memory), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dec(x, memory), _decoder_ref(dec, SMALL)(x, memory), rtol=1e-5, atol=1e-5)


def test_the_policy_reads_the_frame_as_imagenet_normalised_rgb_and_decodes_one_query_per_step() -> None:
    torch.manual_seed(4)
    policy = ACTPolicy(SMALL).eval()
    _randomize_batch_norms(policy)
    _perturb_norms(policy)
    gen = torch.Generator().manual_seed(6)
    image = torch.randint(0, 256, (40, 56, 3), dtype=torch.uint8, generator=gen)
    state = torch.randn(6, generator=gen)

    # the reference, from the policy's own parameters and torch.nn's layers
    mean = torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1)
    x = (image.permute(2, 0, 1)[None].float() / 255.0 - mean) / std
    with torch.no_grad():
        feats = policy.proj(policy.backbone(x)).flatten(2).transpose(1, 2)
        tokens = torch.cat([policy.state_proj(state)[None, None], feats], dim=1) + policy.pos
        memory = tokens
        for layer in policy.encoder:
            memory = _encoder_ref(layer, SMALL)(memory)
        q = policy.queries
        for layer in policy.decoder:
            q = _decoder_ref(layer, SMALL)(q, memory)
        want = policy.head(q)[0]
        got = policy(image, state)
    assert got.shape == (5, 6)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # one token for the state and one per cell of the last stage's grid (stride 4 x 2 = 8)
    assert policy.pos.shape == (1, math.ceil(40 / 8) * math.ceil(56 / 8) + 1, 16)
    assert policy.queries.shape == (1, 5, 16)


def test_the_token_grid_follows_the_backbones_stride() -> None:
    assert ACTPolicy(
        ACTConfig(
            image_hw=(96, 128),
            stage_channels=(8, 8, 8),
            blocks_per_stage=1,
            dim=8,
            heads=2,
            encoder_layers=1,
            feedforward=8,
            chunk_length=2,
        )
    ).pos.shape == (1, 6 * 8 + 1, 8)


def test_the_demo_ramps_from_the_state_to_a_pose_within_reach_of_the_centre() -> None:
    model, example = make_demo_policy()
    image, state = example["observation.images.front"], example["observation.state"]
    assert image.shape == (96, 128, 3) and image.dtype == torch.uint8
    assert state.shape == (6,) and state.dtype == torch.float32
    with torch.no_grad():
        chunk = model(image, state)
    assert chunk.shape == (100, 6)
    target = chunk[-1]
    centre = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 50.0])
    assert bool(((target - centre).abs() < 40.0).all())
    # step k of 100 is k/100 of the way from the state to the target: equal steps, the first one step in
    steps = torch.diff(torch.cat([state[None], chunk]), dim=0)
    torch.testing.assert_close(steps, ((target - state) / 100).expand(100, 6), rtol=1e-4, atol=1e-5)
    # the pose follows the network: centre + 40 tanh(4 x the mean of the head's raw chunk)
    with torch.no_grad():
        model.cfg = ACTConfig(**{**DEMO_CONFIG.__dict__, "reach_deg": 0.0})
        raw = model(image, state)
    torch.testing.assert_close(target, centre + 40.0 * torch.tanh(raw.mean(dim=0) * 4.0), rtol=1e-5, atol=1e-4)


def test_the_policies_are_seeded_and_their_batch_norms_carry_statistics() -> None:
    a, example_a = make_demo_policy()
    b, example_b = make_demo_policy()
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    assert all(torch.equal(example_a[k], example_b[k]) for k in example_a)
    assert not a.training
    norms = [m for m in a.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms
    for m in norms:
        assert float(m.running_mean.abs().max()) <= 0.1 and float(m.running_mean.abs().max()) > 0.0
        assert float(m.running_var.min()) >= 0.5 and float(m.running_var.max()) <= 1.5
    model, example = make_act_policy()
    assert model.cfg == ACT_CONFIG
    assert example["observation.images.front"].shape == (480, 640, 3)
    assert set(example) == {"observation.images.front", "observation.state"}


def test_a_reach_under_one_degree_still_ramps() -> None:
    torch.manual_seed(7)
    cfg = ACTConfig(**{**SMALL.__dict__, "reach_deg": 0.5})
    policy = ACTPolicy(cfg).eval()
    state = torch.tensor([1.0, -2.0, 3.0, 0.0, 0.0, 49.0])
    with torch.no_grad():
        chunk = policy(torch.zeros(40, 56, 3, dtype=torch.uint8), state)
    target = chunk[-1]
    assert bool(((target - torch.tensor([0.0, 0, 0, 0, 0, 50.0])).abs() <= 0.5).all())
    torch.testing.assert_close(chunk[0], state + (target - state) / 5)


def test_the_examples_are_drawn_from_their_own_generator_seeded_one_past_the_model() -> None:
    gen = torch.Generator().manual_seed(1)  # the demo's model is seeded 0
    image = torch.randint(0, 256, (96, 128, 3), dtype=torch.uint8, generator=gen)
    state = torch.randn(6, generator=gen)
    _, example = make_demo_policy()
    assert torch.equal(example["observation.images.front"], image)
    assert torch.equal(example["observation.state"], state)
    model, _ = make_demo_policy()
    variances = torch.cat([m.running_var for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)])
    means = torch.cat([m.running_mean for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)])
    # drawn across their whole ranges: U(0.5, 1.5) and U(-0.1, 0.1)
    assert float(variances.max()) > 1.25 and float(variances.min()) < 0.75
    assert float(means.min()) < -0.05 and float(means.max()) > 0.05


def test_a_stage_that_keeps_its_width_still_projects_its_strided_input() -> None:
    cfg = ACTConfig(stage_channels=(8, 8), blocks_per_stage=1)
    torch.manual_seed(8)
    ours = Backbone(cfg).eval()
    _randomize_batch_norms(ours)
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), _resnet(x, ours, cfg), rtol=1e-5, atol=1e-5)


def test_the_learned_embeddings_start_small_and_every_layer_is_there() -> None:
    torch.manual_seed(9)
    policy = ACTPolicy(SMALL)
    for embedding in (policy.pos.detach(), policy.queries.detach()):  # N(0, 0.02), as ACT initialises them
        assert 0.012 < float(embedding.std()) < 0.028 and abs(float(embedding.mean())) < 0.01
    assert len(policy.encoder) == 2 and len(policy.decoder) == 2
    with torch.device("meta"):
        act = ACTPolicy(ACT_CONFIG)
    # 480 x 640 at ResNet18's stride of 32: a 15 x 20 grid, and the state's token
    assert act.pos.shape == (1, 15 * 20 + 1, 512) and act.queries.shape == (1, 100, 512)
    assert len(act.encoder) == 4 and len(act.decoder) == 1


def test_the_act_examples_are_drawn_from_their_own_generator() -> None:
    gen = torch.Generator().manual_seed(1)
    image = torch.randint(0, 256, (480, 640, 3), dtype=torch.uint8, generator=gen)
    state = torch.randn(6, generator=gen)
    _, example = make_act_policy()
    assert torch.equal(example["observation.images.front"], image)
    assert torch.equal(example["observation.state"], state)
