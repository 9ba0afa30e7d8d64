"""The Kubernetes flavour of the campaign runner: deploy one engine arm, wait for readiness, read the
resolved configuration from the pod log and refuse to measure on a mismatch, run the campaign's Jobs one
at a time (pause, retries with every failed attempt's log kept, resume by skipping passed runs), and handle
a node replaced mid-condition as the study did (discard every repetition of that condition and repeat it
on the replacement). Also the restart measurement (delete the pod; event timestamps for scheduling, image
pull, container start and readiness).

Everything that touches the cluster goes through the small ``KubeApi`` boundary; ``KubernetesApi`` is the
real one (``kubernetes`` client), and the tests drive the runner with a fake that replays recorded
responses (no cluster here)."""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from live import config_capture as cc

NAMESPACE = "servetwin"


@dataclass
class PodInfo:
    name: str
    node: str
    image_ids: tuple[str, ...] = ()      # image digests as the kubelet resolved them


@dataclass
class JobResult:
    succeeded: bool
    log: str
    start_unix: float = 0.0
    end_unix: float = 0.0


class KubeApi(Protocol):
    def apply(self, docs: list[dict[str, Any]]) -> None: ...
    def delete_deployment(self, name: str) -> None: ...
    def wait_ready(self, selector: str, timeout_s: float) -> PodInfo: ...
    def pod_log(self, pod: str) -> str: ...
    def run_job(self, job: dict[str, Any], timeout_s: float) -> JobResult: ...
    def delete_pod(self, pod: str) -> None: ...
    def pod_events(self, pod: str) -> list[tuple[str, float]]: ...


@dataclass
class Arm:
    label: str
    docs: list[dict[str, Any]]                       # rendered manifests of the engine arm
    expected: dict[str, Any]                         # resolved settings the arm must have
    conditions: dict[str, str]                       # condition name → scenario path inside the image
    seeds: tuple[int, ...] = (1, 2, 3)


@dataclass
class Outcome:
    status: dict[str, str] = field(default_factory=dict)       # "arm/condition/seed-N" → passed|failed|skipped
    refused: dict[str, list[str]] = field(default_factory=dict)
    repeated_conditions: list[str] = field(default_factory=list)


SELECTOR = "app.kubernetes.io/component=engine"


def job_for(template: dict[str, Any], arm: str, condition: str, scenario: str, seed: int, expect: dict[str, Any],
            attempt: int) -> dict[str, Any]:
    job = copy.deepcopy(template)
    run_id = f"{arm}-{condition}-s{seed}-a{attempt}".lower().replace("_", "-").replace(".", "-")
    job["metadata"]["name"] = run_id[:63]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    values = {"SCENARIO": scenario, "SEED": str(seed), "RUN_ID": f"{arm}/{condition}/seed-{seed}",
              "ENGINE_LABEL": arm, "EXPECT": " ".join(f"{k}={v}" for k, v in expect.items())}
    for k, v in values.items():
        env[k]["value"] = v
    return job


def passed(log: str) -> bool:
    """The Job's `servetwin live run` summary line says whether the run passed."""
    return any(line.startswith("wrote ") and ", passed:" in line for line in log.splitlines())


class K8sCampaign:
    def __init__(self, api: KubeApi, job_template: dict[str, Any], out: str | Path, pause_s: float = 30.0,
                 retries: int = 2, ready_timeout_s: float = 1800.0, job_timeout_s: float = 7200.0,
                 sleep: Callable[[float], None] = time.sleep, max_condition_repeats: int = 2,
                 prometheus: Callable[[float, float], Any] | None = None):
        self.api, self.template, self.out = api, job_template, Path(out)
        self.pause_s, self.retries = pause_s, retries
        self.ready_timeout_s, self.job_timeout_s = ready_timeout_s, job_timeout_s
        self.sleep, self.max_repeats = sleep, max_condition_repeats
        self.prometheus = prometheus          # (start_unix, end_unix) → telemetry DataFrame for the window
        self._first = True

    def _dir(self, arm: str, cond: str, seed: int) -> Path:
        return self.out / arm / cond / f"seed-{seed}"

    def _done(self, arm: str, cond: str, seed: int) -> bool:
        f = self._dir(arm, cond, seed) / "status.json"
        return f.is_file() and json.loads(f.read_text()).get("passed") is True

    def run(self, arms: list[Arm]) -> Outcome:
        out = Outcome()
        for arm in arms:
            todo = {c: [s for s in arm.seeds if not self._done(arm.label, c, s)] for c in arm.conditions}
            for c, seeds in todo.items():
                for s in arm.seeds:
                    if s not in seeds:
                        out.status[f"{arm.label}/{c}/seed-{s}"] = "skipped"
            if not any(todo.values()):
                continue
            self.api.apply(arm.docs)
            try:
                pod = self.api.wait_ready(SELECTOR, self.ready_timeout_s)
                resolved = cc.parse_log(self.api.pod_log(pod.name))
                resolved["image_ids"] = list(pod.image_ids)
                self._save(self.out / arm.label / "resolved_config.json", resolved)
                bad = cc.mismatches(arm.expected, cc.resolved(resolved, {}, {}))
                if bad:
                    out.refused[arm.label] = bad
                    continue
                for cond, scenario in arm.conditions.items():
                    if todo[cond]:
                        pod = self._condition(arm, cond, scenario, todo[cond], pod, out)
            finally:
                self.api.delete_deployment("engine")
        return out

    def _condition(self, arm: Arm, cond: str, scenario: str, seeds: list[int], pod: PodInfo,
                   out: Outcome) -> PodInfo:
        for _repeat in range(self.max_repeats + 1):
            replaced = False
            for seed in seeds:
                self._one(arm, cond, scenario, seed, out)
                now = self.api.wait_ready(SELECTOR, self.ready_timeout_s)
                if now.node != pod.node:                  # node reclaimed mid-condition: discard and repeat
                    replaced = True
                    pod = now
                    break
            if not replaced:
                return pod
            out.repeated_conditions.append(f"{arm.label}/{cond}")
            for seed in arm.seeds:
                d = self._dir(arm.label, cond, seed)
                if d.exists():
                    shutil.move(str(d), str(d.parent / f"{d.name}.discarded-node-replaced"))
            seeds = list(arm.seeds)
        return pod

    def _one(self, arm: Arm, cond: str, scenario: str, seed: int, out: Outcome) -> None:
        key = f"{arm.label}/{cond}/seed-{seed}"
        d = self._dir(arm.label, cond, seed)
        for attempt in range(self.retries + 1):
            if not self._first:
                self.sleep(self.pause_s)
            self._first = False
            res = self.api.run_job(job_for(self.template, arm.label, cond, scenario, seed, arm.expected, attempt),
                                   self.job_timeout_s)
            ok = res.succeeded and passed(res.log)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"attempt-{attempt + 1}.log").write_text(res.log)
            if self.prometheus is not None and res.end_unix > res.start_unix:
                self.prometheus(res.start_unix, res.end_unix).to_parquet(d / f"attempt-{attempt + 1}.telemetry.parquet",
                                                                         index=False)
            if ok:
                self._save(d / "status.json", {"passed": True, "attempts": attempt + 1})
                out.status[key] = "passed"
                return
        self._save(d / "status.json", {"passed": False, "attempts": self.retries + 1})
        out.status[key] = "failed"

    @staticmethod
    def _save(path: Path, obj: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


RESTART_EVENTS = ("Scheduled", "Pulling", "Pulled", "Created", "Started")


def restart_measurement(api: KubeApi, timeout_s: float = 1800.0) -> dict[str, float]:
    """Delete the serving pod, wait for its replacement to be ready, and return seconds from deletion to
    each event (Scheduled, Pulling, Pulled, Created, Started) and to readiness."""
    old = api.wait_ready(SELECTOR, timeout_s)
    t0 = time.time()
    api.delete_pod(old.name)
    new = api.wait_ready(SELECTOR, timeout_s)
    ready = time.time() - t0
    marks = {reason: ts - t0 for reason, ts in api.pod_events(new.name) if reason in RESTART_EVENTS}
    return {**marks, "Ready": ready}


class KubernetesApi:
    """The real boundary, with the ``kubernetes`` client (not exercised here: no cluster)."""

    def __init__(self, namespace: str = NAMESPACE, poll_s: float = 5.0):
        from kubernetes import client, config
        config.load_kube_config()
        self.ns, self.poll_s = namespace, poll_s
        # the client's models are Optional everywhere; this adapter reads them as the API returns them
        self.core: Any = client.CoreV1Api()
        self.apps: Any = client.AppsV1Api()
        self.batch: Any = client.BatchV1Api()
        self.client: Any = client.ApiClient()

    def apply(self, docs: list[dict[str, Any]]) -> None:
        from kubernetes import utils
        from kubernetes.client.exceptions import ApiException
        for doc in docs:
            try:
                utils.create_from_dict(self.client, doc, namespace=self.ns)
            except (utils.FailToCreateError, ApiException) as err:
                if "AlreadyExists" not in str(err):
                    raise

    def delete_deployment(self, name: str) -> None:
        self.apps.delete_namespaced_deployment(name, self.ns)

    def wait_ready(self, selector: str, timeout_s: float) -> PodInfo:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items:
                conds = {c.type: c.status for c in (p.status.conditions or [])}
                if conds.get("Ready") == "True" and p.metadata.deletion_timestamp is None:
                    ids = tuple(c.image_id for c in (p.status.container_statuses or []))
                    return PodInfo(p.metadata.name, p.spec.node_name, ids)
            time.sleep(self.poll_s)
        raise TimeoutError(f"no ready pod for {selector} within {timeout_s} s")

    def pod_log(self, pod: str) -> str:
        return str(self.core.read_namespaced_pod_log(pod, self.ns))

    def run_job(self, job: dict[str, Any], timeout_s: float) -> JobResult:
        name = job["metadata"]["name"]
        start = time.time()
        self.batch.create_namespaced_job(self.ns, job)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            st = self.batch.read_namespaced_job_status(name, self.ns).status
            if st.succeeded or st.failed:
                pods = self.core.list_namespaced_pod(self.ns, label_selector=f"job-name={name}").items
                log = "".join(self.pod_log(p.metadata.name) for p in pods)
                return JobResult(bool(st.succeeded), log, start, time.time())
            time.sleep(self.poll_s)
        return JobResult(False, f"job {name} did not finish within {timeout_s} s")

    def delete_pod(self, pod: str) -> None:
        self.core.delete_namespaced_pod(pod, self.ns)

    def pod_events(self, pod: str) -> list[tuple[str, float]]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={pod}").items
        return [(e.reason, (e.first_timestamp or e.event_time).timestamp()) for e in evs]


def main(argv: list[str] | None = None) -> int:
    """``python -m live.k8s_runner CAMPAIGN.yaml --out DIR``; the campaign lists arms as
    ``{label, overlay, expected: {…}, conditions: {name: scenario path in the image}, seeds: […]}`` plus
    ``job: infra/k8s/workload/job.yaml``, ``pause_s`` and ``retries``; ``--restart`` measures a restart."""
    import argparse
    import importlib.util

    import yaml
    ap = argparse.ArgumentParser(description="run a live campaign on Kubernetes, one engine arm at a time")
    ap.add_argument("campaign")
    ap.add_argument("--out", required=True)
    ap.add_argument("--restart", action="store_true", help="measure a serving-pod restart instead")
    ap.add_argument("--prometheus", default=None, help="Prometheus URL (e.g. a port-forward) for each run's window")
    a = ap.parse_args(argv)
    api = KubernetesApi()
    if a.restart:
        print(json.dumps(restart_measurement(api), indent=2))
        return 0
    c = yaml.safe_load(Path(a.campaign).read_text())
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("render", root / "infra" / "render.py")
    assert spec and spec.loader
    render_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render_mod)
    template = next(yaml.safe_load_all(Path(c["job"]).read_text()))
    arms = [Arm(x["label"], render_mod.render(x["overlay"]), x.get("expected", {}), x["conditions"],
                tuple(x.get("seeds", (1, 2, 3)))) for x in c["arms"]]
    prom = None
    if a.prometheus:
        import asyncio

        import httpx

        from live.telemetry import prometheus_range

        def prom(start: float, end: float) -> Any:
            async def q() -> Any:
                async with httpx.AsyncClient(timeout=30) as cl:
                    return await prometheus_range(cl, a.prometheus, start, end, start)
            return asyncio.run(q())
    out = K8sCampaign(api, template, a.out, c.get("pause_s", 30.0), c.get("retries", 2), prometheus=prom).run(arms)
    print(json.dumps({"status": out.status, "refused": out.refused, "repeated": out.repeated_conditions}, indent=2))
    return 1 if out.refused or "failed" in out.status.values() else 0


if __name__ == "__main__":
    raise SystemExit(main())
