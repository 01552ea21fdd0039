"""`xmfu references`: the table with its sources; bad options are one paragraph and exit 2."""

from __future__ import annotations

import json

from xmfu.harness.cli.main import COMMANDS


def _printed(capsys, *args: str) -> str:
    assert COMMANDS["references"](list(args)) == 0
    return capsys.readouterr().out


def test_references_lists_every_entry_with_its_source(capsys):
    out = _printed(capsys)
    assert ("mamf-nvidia-h100-sxm-bf16: nvidia-h100-sxm matmul_achievable 794.5 TFLOP/s (dtype bf16, "
            "world_size 1)") in out
    assert "source: https://github.com/NVIDIA/nccl-tests/issues/212, read 2026-11-26" in out
    assert ("under transformer-palm: 14451 x (6 x 7504924672 + 12 x 32 x 32 x 128 x 8192) / 1e12 = 14451 x "
            "57914449920 / 1e12 = 836.9") in out


def test_references_json_and_one_device(capsys):
    data = json.loads(_printed(capsys, "--json", "--device", "amd-mi300x"))
    assert [e["id"] for e in data["references"]] == ["mamf-amd-mi300x-bf16", "amd-cvs-mi300x-allreduce-8"]
    assert data["bands"]["within"] == 0.95


def test_references_list_the_attention_entries_with_their_conversions(capsys):
    out = _printed(capsys, "--device", "amd-mi355x")
    assert ("aiter-815-mi355x-bwd-bf16-b8-h64kv8-s8192-d128-causal: amd-mi355x attention 1052.6 TFLOP/s (mode bwd, "
            "dtype bf16, batch 8, heads 64, kv_heads 8, seq_len 8192, head_dim 128, causal True, world_size 1)") in out
    assert "the source printed: 2105 TFLOP/s (attention-full)" in out
    assert ("under attention-exact: 2.5 x 4 x 8 x 64 x 128 x (8192 x 8193 / 2) / 0.020893 s / 1e12 = "
            "2.5 x 8797166764032 / 0.020893 / 1e12 = 1052.6") in out
    assert "source: https://github.com/ROCm/aiter/pull/3390, read 2026-11-26" in out


def test_bad_options_are_one_paragraph_and_exit_2(capsys):
    assert COMMANDS["references"](["--device", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xmfu: references: --device 'h100' is not a peak-table id. Allowed: nvidia-a100")
    assert len(err.strip().splitlines()) == 1
    try:
        COMMANDS["references"](["--bogus"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_references_list_the_energy_entries_with_what_their_energy_covers(capsys):
    out = _printed(capsys, "--device", "nvidia-h100-sxm")
    assert ("mlenergy-v3-h100-llama3.1-8b-chat-decode-b64: nvidia-h100-sxm energy_per_token 0.1186 J/token (model 8b, "
            "phase decode, batch 64, dtype bf16, world_size 1)") in out
    assert "  energy scope: device: the GPU's energy as Zeus's ZeusMonitor measures it" in out
    assert "  energy tokens: output tokens generated in the window; the window's energy includes the prefill" in out
    assert "under power-over-throughput: 610.35 W / 5147.15 output tokens/s" in out
    assert "source: https://github.com/ml-energy/leaderboard/blob/main/public/data/models/" in out


def test_references_list_the_moe_entry_with_its_flop_count(capsys):
    out = _printed(capsys, "--device", "nvidia-b200")
    assert ("nemo-25.02-dgx-b200-mixtral-8x7b-fp8: nvidia-b200 training_tokens 15457 tokens/s per device (model "
            "mixtral-8x7b, seq_len 4096, dtype fp8, world_size 64, nodes 8)") in out
    assert "the source printed: 1282 TFLOP/s per device (moe-palm)" in out
    assert ("under moe-palm: 15457 x (6 x 12748853248 + 12 x 32 x 32 x 128 x 4096) / 1e12 = 15457 x 82935570432 / "
            "1e12 = 1281.9") in out
