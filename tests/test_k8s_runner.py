"""The Kubernetes campaign runner against a fake API boundary that replays recorded responses."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import yaml

from live.k8s_runner import Arm, JobResult, K8sCampaign, PodInfo, restart_measurement

ROOT = Path(__file__).parent.parent
spec = importlib.util.spec_from_file_location("render", ROOT / "infra" / "render.py")
assert spec and spec.loader
render_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_mod)

VLLM_LOG = ("INFO 11-29 engine.py:238] Initializing an LLM engine (v0.6.3) with config: model='/models/Llama-3.1-8B', "
            "max_seq_len=16384, use_v2_block_manager=True, num_scheduler_steps=1, chunked_prefill_enabled=False "
            "multi_step_stream_outputs=True, enable_prefix_caching=True, use_async_output_proc=True\n"
            "INFO 11-29 gpu_executor.py:122] # GPU blocks: 1291, # CPU blocks: 2048\n")
GOOD = "wrote /records/x: complete, passed: 100.0% ok, dispatch lag p50 0.40 ms\n"
BAD = "wrote /records/x: complete, FAILED: 80.0% ok, errors {\"http_5xx\": 9}\n"


class FakeKube:
    """Replays: a pod per deployment, node names per readiness check, job logs in order."""

    def __init__(self, nodes: list[str], jobs: list[JobResult], log: str = VLLM_LOG):
        self.nodes, self.jobs, self.log = list(nodes), list(jobs), log
        self.applied: list[str] = []
        self.jobs_run: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.applied += [d["kind"] for d in docs]

    def delete_deployment(self, name: str) -> None:
        self.deleted.append(name)

    def wait_ready(self, selector: str, timeout_s: float) -> PodInfo:
        node = self.nodes.pop(0) if len(self.nodes) > 1 else self.nodes[0]
        return PodInfo("engine-abc", node, ("docker.io/vllm/vllm-openai@sha256:0123abcd",))

    def pod_log(self, pod: str) -> str:
        return self.log

    def run_job(self, job: dict[str, Any], timeout_s: float) -> JobResult:
        self.jobs_run.append(job)
        res = self.jobs.pop(0) if self.jobs else JobResult(True, GOOD)
        res.start_unix, res.end_unix = 1000.0 * len(self.jobs_run), 1000.0 * len(self.jobs_run) + 600.0
        return res

    def delete_pod(self, pod: str) -> None:
        self.deleted.append(pod)

    def pod_events(self, pod: str) -> list[tuple[str, float]]:
        import time
        t = time.time()
        return [("Scheduled", t + 1), ("Pulling", t + 2), ("Pulled", t + 30), ("Started", t + 31)]


def template() -> dict[str, Any]:
    return next(yaml.safe_load_all((ROOT / "infra/k8s/workload/job.yaml").read_text()))


def arm(expected: dict[str, Any]) -> Arm:
    docs = render_mod.render(ROOT / "infra/k8s/engines/vllm/overlays/defaults")
    return Arm("vllm-defaults", docs, expected, {"rate-0.12": "/scenarios/rate-0.12.yaml"}, seeds=(1, 2, 3))


def runner(api: FakeKube, out: Path) -> K8sCampaign:
    return K8sCampaign(api, template(), out, pause_s=30, retries=2, sleep=lambda s: None)


def test_runs_jobs_one_at_a_time_and_resumes(tmp_path: Path):
    api = FakeKube(["node-a"], [])
    out = runner(api, tmp_path).run([arm({"enable_prefix_caching": True, "enable_chunked_prefill": False})])
    assert out.status == {f"vllm-defaults/rate-0.12/seed-{s}": "passed" for s in (1, 2, 3)}
    env = {e["name"]: e["value"] for e in api.jobs_run[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SEED"] == "1" and "enable_chunked_prefill=False" in env["EXPECT"]
    assert api.deleted == ["engine"] and "Deployment" in api.applied
    resolved = json.loads((tmp_path / "vllm-defaults" / "resolved_config.json").read_text())
    assert resolved["num_gpu_blocks"] == 1291 and resolved["image_ids"][0].endswith("sha256:0123abcd")
    api2 = FakeKube(["node-a"], [])
    out2 = runner(api2, tmp_path).run([arm({"enable_prefix_caching": True})])
    assert set(out2.status.values()) == {"skipped"} and not api2.jobs_run and not api2.applied


def test_refuses_to_measure_on_a_config_mismatch(tmp_path: Path):
    api = FakeKube(["node-a"], [])
    out = runner(api, tmp_path).run([arm({"enable_chunked_prefill": True})])
    assert "vllm-defaults" in out.refused and "enable_chunked_prefill" in out.refused["vllm-defaults"][0]
    assert not api.jobs_run and api.deleted == ["engine"]


def test_failed_pod_is_retried_and_its_log_kept(tmp_path: Path):
    api = FakeKube(["node-a"], [JobResult(False, "pod OOMKilled\n"), JobResult(True, BAD), JobResult(True, GOOD)])
    out = runner(api, tmp_path).run([arm({})])
    assert out.status["vllm-defaults/rate-0.12/seed-1"] == "passed"
    d = tmp_path / "vllm-defaults" / "rate-0.12" / "seed-1"
    assert (d / "attempt-1.log").read_text() == "pod OOMKilled\n" and "FAILED" in (d / "attempt-2.log").read_text()
    assert json.loads((d / "status.json").read_text()) == {"attempts": 3, "passed": True}


def test_node_replaced_mid_condition_repeats_the_whole_condition(tmp_path: Path):
    # readiness checks: start (a), after seed 1 (a), after seed 2 (b: replaced) → discard, then all on b
    api = FakeKube(["node-a", "node-a", "node-b", "node-b"], [])
    out = runner(api, tmp_path).run([arm({})])
    assert out.repeated_conditions == ["vllm-defaults/rate-0.12"]
    seeds = [next(e["value"] for e in j["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "SEED")
             for j in api.jobs_run]
    assert seeds == ["1", "2", "1", "2", "3"]
    cond = tmp_path / "vllm-defaults" / "rate-0.12"
    assert (cond / "seed-1.discarded-node-replaced").is_dir() and (cond / "seed-3" / "status.json").is_file()


def test_restart_measurement_reports_event_offsets():
    marks = restart_measurement(FakeKube(["node-a"], []))
    assert {"Scheduled", "Pulled", "Started", "Ready"} <= set(marks)
    assert marks["Scheduled"] < marks["Pulled"] < marks["Started"]


def test_prometheus_window_is_collected_per_run(tmp_path: Path):
    import pandas as pd
    windows = []

    def prom(start: float, end: float) -> pd.DataFrame:
        windows.append((start, end))
        return pd.DataFrame({"t_s": [0.0, 5.0], "kv_usage": [0.1, 0.2], "waiting": [0, 1], "running": [1, 2],
                             "preemptions": [0, 0], "prefix_hit_tokens": [0, 10], "prefix_query_tokens": [0, 20]})
    api = FakeKube(["node-a"], [])
    K8sCampaign(api, template(), tmp_path, sleep=lambda s: None, prometheus=prom).run([arm({})])
    assert windows == [(1000.0, 1600.0), (2000.0, 2600.0), (3000.0, 3600.0)]
    t = pd.read_parquet(tmp_path / "vllm-defaults" / "rate-0.12" / "seed-2" / "attempt-1.telemetry.parquet")
    assert list(t["kv_usage"]) == [0.1, 0.2]
