"""Production trace import (scenarios.importers): exact lengths, prefix reuse from hash ids, sessions as
dependants, one-line refusals, determinism; the Mooncake conversation sample end to end."""

import json
from pathlib import Path

import numpy as np
import pytest

from scenarios.importers import ImportOptions, TraceImportError, import_trace
from scenarios.trace import read_trace
from servetwin.cli import main

MOONCAKE = Path(__file__).resolve().parent / "data" / "mooncake" / "conversation_trace.jsonl"   # Apache-2.0


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mooncake_rows() -> list[dict]:
    return [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 0, "input_length": 1030, "output_length": 7, "hash_ids": [0, 1, 3]},
            {"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [0, 4]},
            {"timestamp": 3000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 4000, "input_length": 300, "output_length": 9, "hash_ids": [5]}]


def _common(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def test_mooncake_lengths_arrivals_and_exact_shared_prefixes(tmp_path):
    rows = _mooncake_rows()
    t = import_trace(_jsonl(tmp_path / "m.jsonl", rows), ImportOptions("mooncake", seed=3))
    assert [int(x) for x in t.prompt_lengths()] == [r["input_length"] for r in rows]
    assert t.arrays["max_tokens"].tolist() == [r["output_length"] for r in rows]
    assert t.arrays["arrival_s"].tolist() == [0.0, 0.0, 1.5, 3.0, 4.0]
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i]["hash_ids"], rows[j]["hash_ids"]
            k = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            want = min(512 * k, rows[i]["input_length"], rows[j]["input_length"])
            assert _common(t.prompt(i), t.prompt(j)) == want, (i, j)
    # tokens the infinite cache would hold: request 1 reuses blocks 0-1, request 2 block 0, request 3 all
    hit = (1024 + 512 + 1100) / sum(r["input_length"] for r in rows)
    assert t.manifest["imported"]["infinite_cache_hit_ratio"] == pytest.approx(hit, abs=1e-6)


def test_same_seed_same_bytes_other_seed_other_tokens(tmp_path):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        assert main(["trace", "import", str(src), "--format", "mooncake", "--seed", str(seed),
                     "--out", str(tmp_path / name)]) == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    assert (tmp_path / "a" / "pool.npy").read_bytes() != (tmp_path / "c" / "pool.npy").read_bytes()


def test_bailian_sessions_become_dependants_with_their_recorded_gap(tmp_path):
    rows = [{"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 40, "output_length": 4,
             "hash_ids": [1, 2, 3], "turn": 1},
            {"chat_id": 20, "parent_chat_id": -1, "timestamp": 2.0, "input_length": 20, "output_length": 4,
             "hash_ids": [7, 8], "turn": 1},
            {"chat_id": 11, "parent_chat_id": 10, "timestamp": 6.5, "input_length": 60, "output_length": 4,
             "hash_ids": [1, 2, 4, 5], "turn": 2}]
    t = import_trace(_jsonl(tmp_path / "b.jsonl", rows), ImportOptions("bailian"))
    assert t.n_dags == 2 and t.arrays["dag"].tolist() == [0, 0, 1]          # the follow-up joins its session
    assert t.predecessors(1).tolist() == [0] and t.arrays["delay_s"][1] == pytest.approx(5.5)
    assert _common(t.prompt(0), t.prompt(1)) == 32                          # two 16-token blocks shared
    assert t.manifest["imported"]["follow_ups"] == 1


def test_azure_and_burstgpt_have_unique_prompts(tmp_path):
    az = tmp_path / "az.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,100,5\n"
                  "2023-11-16 18:17:04.5000000,50,7\n")
    t = import_trace(az, ImportOptions("azure"))
    assert t.arrays["arrival_s"][1] == pytest.approx(0.52004, abs=1e-6)
    assert t.manifest["imported"]["infinite_cache_hit_ratio"] == 0 and not t.manifest["imported"]["prefix_information"]
    assert _common(t.prompt(0), t.prompt(1)) == 0
    bg = tmp_path / "bg.csv"
    bg.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,30,10,40,Conversation log\n6,GPT-4,20,0,20,API log\n9,GPT-4,25,5,30,API log\n")
    t = import_trace(bg, ImportOptions("burstgpt"))
    assert t.n_requests == 2 and t.arrays["arrival_s"].tolist() == [0.0, 4.0]      # the failure is dropped


@pytest.mark.parametrize("bad,field", [
    ('{"timestamp": 0, "input_length": 10, "output_length": 1}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "hash_ids"),
    ('{"timestamp": "x", "input_length": 10, "output_length": 1, "hash_ids": [1]}', "timestamp"),
    ('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}', "input_length"),
    ("not json", "JSON"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [2]}', "precedes"),
])
def test_bad_line_is_one_line_naming_file_line_and_field_nothing_written(tmp_path, capsys, bad, field):
    src = tmp_path / "m.jsonl"
    src.write_text('{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n' + bad + "\n")
    assert main(["trace", "import", str(src), "--format", "mooncake", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{src}:2" in err and field in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_format_and_bad_options_exit_2(tmp_path, capsys):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    for extra in (["--format", "nope"], ["--format", "mooncake", "--window", "5"],
                  ["--format", "mooncake", "--sample", "0"], ["--format", "mooncake", "--rate-scale", "0"]):
        assert main(["trace", "import", str(src), *extra, "--out", str(tmp_path / "o")]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(TraceImportError):
        import_trace(tmp_path / "missing.jsonl", ImportOptions("mooncake"))


def test_mooncake_conversation_trace_whole_imports_with_its_published_reuse():
    t = import_trace(MOONCAKE, ImportOptions("mooncake"))
    imp = t.manifest["imported"]
    assert t.n_requests == 12031 and imp["blocks"] == 182790
    assert imp["infinite_cache_hit_ratio"] == pytest.approx(0.374, abs=0.0005)     # 37.4 % of prompt tokens
    assert int(t.prompt_lengths().sum()) == 144_793_823 and int(t.arrays["max_tokens"].sum()) == 4_122_048


def test_mooncake_sample_window_imports_validates_and_simulates_on_both_caches(tmp_path):
    from simulator import simulate
    out = tmp_path / "moon"
    assert main(["trace", "import", str(MOONCAKE), "--format", "mooncake", "--window", "0:60",
                 "--out", str(out)]) == 0
    t = read_trace(out)
    ratio = t.manifest["imported"]["infinite_cache_hit_ratio"]
    assert t.n_requests > 100 and 0.02 < ratio < 0.6       # the first minute: a cold cache
    for engine, over in (("vllm-0.6.3", {"enable_prefix_caching": True}), ("sglang-0.4.1", {})):
        rec = simulate(t, engine, "h200", context=131072, overrides=over)
        q = rec.requests
        hits = q["cached_tokens"].clip(lower=0).sum() / q["prompt_tokens"].sum()
        # a cache as large as the window's prompts: what each engine reuses, short of the ratio only by
        # vLLM's whole 16-token blocks and both engines' last prompt token
        assert ratio - 0.02 < hits <= ratio + 1e-9, (engine, hits, ratio)


def _call(ts: str, dur_ms: int, prompt: int, completion: int) -> dict:
    return {"message_id": ts, "timestamp": ts, "duration_ms": dur_ms, "initiator_type": "agent",
            "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion}}


def test_agent_sessions_chain_calls_with_gaps_prefixes_and_compaction(tmp_path):
    import gzip
    s1 = {"session_id": "a", "turns": [
        {"turn_id": 1, "llm_calls": [_call("2026-06-01T00:00:00Z", 1000, 100, 10),
                                     _call("2026-06-01T00:00:03Z", 1000, 150, 5),       # grows: reuses 100+10
                                     _call("2026-06-01T00:00:03.5Z", 500, 120, 5),      # overlaps call 1
                                     _call("2026-06-01T00:00:05Z", 0, 0, 0)],           # no prompt: skipped
         "tool_batches": []},
        {"turn_id": 2, "llm_calls": [_call("2026-06-01T00:00:10Z", 1000, 20000, 8),
                                     _call("2026-06-01T00:00:12Z", 1000, 12000, 8)]}]}   # compaction
    src = tmp_path / "s.jsonl.gz"
    with gzip.open(src, "wt") as f:
        f.write(json.dumps(s1) + "\n")
    t = import_trace(src, ImportOptions("agent-sessions"))
    assert t.n_requests == 5 and [int(x) for x in t.prompt_lengths()][:2] == [100, 150]
    i0, i1 = 0, 1
    assert t.predecessors(i1).tolist() == [i0] and t.arrays["delay_s"][i1] == pytest.approx(2.0)
    assert _common(t.prompt(i0), t.prompt(i1)) == 100                      # the predecessor's whole prompt ...
    gen = t.prompt(i1)[100:110]                                             # ... then its completion's block
    assert gen.size == 10 and t.n_dags == 1
    assert t.predecessors(2).tolist() == [i0]          # the latest call finished by its start is call 0
    lens = [int(x) for x in t.prompt_lengths()]
    big, small = lens.index(20000), lens.index(12000)
    assert _common(t.prompt(big), t.prompt(small)) == 0                     # compaction breaks the chain


def _tokenizer_dir(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["hello", "world", "how", "are", "you", "fine", "thanks", "what", "is", "the", "weather", "like",
             "today", "sunny", "and", "warm"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return d


def test_sharegpt_counts_with_the_tokenizer_and_chains_turns(tmp_path):
    convs = [{"id": "a", "conversations": [
                {"from": "human", "value": "hello world how are you"},
                {"from": "gpt", "value": "fine thanks what is the weather"},
                {"from": "human", "value": "what is the weather like today"},
                {"from": "gpt", "value": "sunny and warm today hello"}]},
             {"id": "b", "conversations": [{"from": "human", "value": "hello"}]},
             {"id": "c", "conversations": [{"from": "human", "value": "hi there you"},
                                           {"from": "gpt", "value": "hello hello hello hello"}]}]
    src = tmp_path / "sg.json"
    src.write_text(json.dumps(convs))
    tok = str(_tokenizer_dir(tmp_path))
    one = import_trace(src, ImportOptions("sharegpt", rate=2.0, tokenizer=tok))
    assert one.n_requests == 1 and int(one.prompt_lengths()[0]) == 5 and one.arrays["max_tokens"][0] == 6
    two = import_trace(src, ImportOptions("sharegpt", rate=2.0, tokenizer=tok, max_turns=2, seed=4))
    lens = [int(x) for x in two.prompt_lengths()]
    assert lens == [5, 17, 3] or sorted(lens) == [3, 5, 17]
    k = lens.index(17)
    assert two.predecessors(k).size == 1 and _common(two.prompt(k - 1), two.prompt(k)) == 5
    assert main(["trace", "import", str(src), "--format", "sharegpt", "--rate", "1",
                 "--out", str(tmp_path / "o")]) == 2                          # no tokenizer: one line, exit 2


def test_agent_call_overlapping_every_earlier_one_starts_its_own_graph(tmp_path):
    s = {"session_id": "b", "turns": [{"turn_id": 1, "llm_calls": [_call("2026-06-01T00:00:00Z", 1000, 50, 5),
                                                                   _call("2026-06-01T00:00:00.5Z", 1000, 60, 5)]}]}
    src = _jsonl(tmp_path / "s.jsonl", [s])
    t = import_trace(src, ImportOptions("agent-sessions"))
    assert t.n_dags == 2 and t.arrays["arrival_s"].tolist() == [0.0, 0.5]
    assert main(["trace", "import", str(_jsonl(tmp_path / "bad.jsonl", [{"session_id": "x", "turns": 3}])),
                 "--format", "agent-sessions", "--out", str(tmp_path / "o")]) == 2


def test_trace_show_draws_the_imported_trace_over_time_same_bytes(tmp_path, capsys):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    assert main(["trace", "import", str(src), "--format", "mooncake", "--out", str(tmp_path / "t")]) == 0
    outs = []
    for name in ("a.png", "b.png"):
        assert main(["trace", "show", str(tmp_path / "t"), "--figure", str(tmp_path / name)]) == 0
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1] and outs[0][:4] == b"\x89PNG"
    assert "infinite-cache hit ratio" in capsys.readouterr().out
    assert main(["trace", "show", str(tmp_path / "t"), "--figure", str(tmp_path / "x.jpg")]) == 2


def test_vocabulary_range_and_max_len_select_what_a_small_engine_takes(tmp_path):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    t = import_trace(src, ImportOptions("mooncake", vocab_low=3, vocab_high=50, max_len=700))
    assert t.n_requests == 2 and t.manifest["scenario"]["import"]["rows_read"] == 5     # 600+3 and 300+9 fit
    assert t.arrays["pool"].min() >= 3 and t.arrays["pool"].max() < 50
    assert main(["trace", "import", str(src), "--format", "mooncake", "--vocab-low", "60", "--vocab-high", "50",
                 "--out", str(tmp_path / "o")]) == 2


def test_a_grid_condition_replays_an_imported_trace_once_per_configuration_and_resumes(tmp_path, capsys):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    assert main(["trace", "import", str(src), "--format", "mooncake", "--seed", "7", "--out", str(tmp_path / "t")]) == 0
    grid = tmp_path / "g.yaml"
    grid.write_text(f"name: imported\nseeds: [1, 2]\nconditions:\n  - {{name: mooncake, trace: {tmp_path / 't'}}}\n"
                    "arms:\n  defaults:\n    vllm: {engine: vllm-0.6.3, set: {enable_prefix_caching: true}}\n"
                    "    sglang: {engine: sglang-0.4.1}\n")
    from scenarios.grid import cells, load_grid
    cs = cells(load_grid(grid))
    assert [(c.config, c.seed) for c in cs] == [("vllm", 7), ("sglang", 7)]
    out = tmp_path / "runs"
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert sorted(p.parent.parent.name for p in out.glob("mooncake/defaults/*/seed-7/run.json")) == ["sglang", "vllm"]
    capsys.readouterr()
    assert main(["sweep", str(grid), "--out", str(out), "--jobs", "1"]) == 0        # resumes: nothing to run
    assert "2 already complete" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(grid.read_text().replace("trace:", "set: {duration_s: 5}, trace:"))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "r2")]) == 2


def test_compare_twins_a_live_run_of_an_imported_trace_given_its_directory(tmp_path, capsys):
    from analysis.records import read_run, write_run
    from simulator import simulate
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    assert main(["trace", "import", str(src), "--format", "mooncake", "--out", str(tmp_path / "t")]) == 0
    rec = simulate(read_trace(tmp_path / "t"), "vllm-0.6.3", "l4", overrides={"enable_prefix_caching": True})
    rec.meta["source"] = "live"                     # pretend a live engine produced exactly this
    rec.meta["engine"] = "apc-on"
    write_run(rec, tmp_path / "live" / "seed-0")
    capsys.readouterr()
    args = ["compare", str(tmp_path / "sim"), str(tmp_path / "live"), "--hardware", "l4", "--model", "llama-3.1-8b",
            "--format", "json"]
    assert main(args) == 1
    assert "imported trace" in capsys.readouterr().err and read_run(tmp_path / "live" / "seed-0")
    assert main([*args, "--trace", str(tmp_path / "t")]) == 0
    rows = json.loads(capsys.readouterr().out)["side_by_side"]
    bad = [r for r in rows if r["rel_error"] is not None and abs(r["rel_error"]) >= 1e-9]
    assert rows and not bad, [(r["metric"], r["measured"], r["simulated"]) for r in bad]


def test_an_unwritten_import_is_sealed_like_a_written_one(tmp_path):
    src = _jsonl(tmp_path / "m.jsonl", _mooncake_rows())
    mem = import_trace(src, ImportOptions("mooncake"))
    disk = import_trace(src, ImportOptions("mooncake"), tmp_path / "t")
    assert mem.digest == disk.digest == read_trace(tmp_path / "t").digest
