"""The layers as docs/architecture.md draws them, read from the source's imports (lazy ones included): each
package imports only the packages below it, and the module rules the architecture names hold."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"foundation": -1, "scenarios": 0, "analysis": 1, "simulator": 2, "live": 3, "serve": 3, "paper_figures": 3,
        "calibrate": 4, "servetwin": 5}


def _imports() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pkg in RANK:
        for f in (ROOT / pkg).rglob("*.py"):
            mod = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            names: set[str] = set()
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
                    names.update(f"{node.module}.{a.name}" for a in node.names)
            out[mod] = {n for n in names if n.split(".")[0] in RANK}
    return out


def test_every_package_imports_only_the_layers_below_it():
    bad = [f"{mod} imports {n}" for mod, names in _imports().items() for n in names
           if RANK[n.split(".")[0]] > RANK[mod.split(".")[0]]
           or (RANK[n.split(".")[0]] == RANK[mod.split(".")[0]] and n.split(".")[0] != mod.split(".")[0])]
    assert not bad, bad


def test_the_simulator_and_figures_keep_to_their_layers():
    imports = _imports()
    sim = {n for mod, names in imports.items() if mod.startswith("simulator") for n in names}
    assert not any(n.startswith(("analysis.metrics", "analysis.tables", "servetwin")) for n in sim), sim
    rec = imports["analysis.records"]
    assert not any(n.startswith("scenarios") for n in rec), rec     # the record contract stands on foundation
    figs = {n for mod, names in imports.items() if mod.startswith("paper_figures") for n in names}
    assert not any(n.startswith("simulator") for n in figs), figs          # figures never simulate


def test_no_module_cycles_within_a_package():
    imports = _imports()
    graph = {m: {n for n in names if n in imports or n.rsplit(".", 1)[0] in imports} for m, names in imports.items()}
    graph = {m: {n if n in imports else n.rsplit(".", 1)[0] for n in ns} - {m} for m, ns in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in graph.get(m, ()):
            assert state.get(n) != 1, f"import cycle: {' → '.join([*path, m, n])}"
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_the_image_and_the_distribution_carry_every_package():
    docker = (ROOT / "Dockerfile").read_text()
    toml = (ROOT / "pyproject.toml").read_text()
    for pkg in RANK:
        assert f"COPY {pkg} {pkg}" in docker and f'"{pkg}*"' in toml, pkg


def test_a_module_run_as_a_script_defines_everything_before_it_runs():
    """`python -m pkg.mod` runs the `if __name__ == "__main__"` block where it stands: anything defined below it
    does not exist yet (live.local_engine --engine sglang once failed so), so the block comes last."""
    late = []
    for pkg in RANK:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            body = ast.parse(f.read_text()).body
            guards = [i for i, n in enumerate(body) if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
            if guards and guards[-1] != len(body) - 1:
                late.append(str(f.relative_to(ROOT)))
    assert not late, f"a __main__ block before the module's end: {late}"


def test_the_calibration_library_imports_nothing_of_the_twin_study():
    """calibrate/ is the library (probes, fits, scales, compare, the L4 default, the GPU probe); the CPU twin
    study and its investigations (calibrate/twin/) use it, never the other way round."""
    bad = [f"{mod} imports {n}" for mod, names in _imports().items()
           if mod.startswith("calibrate.") and not mod.startswith("calibrate.twin") for n in names
           if n.startswith("calibrate.twin")]
    assert not bad, bad


def test_the_study_s_investigations_have_no_side_doors():
    """They run as `servetwin twin-study diagnose NAME`, not `python -m` (no __main__ block), and every one is
    in the registry."""
    from calibrate.twin.diagnose import DIAGNOSES
    mods = {m for m, _ in DIAGNOSES.values()}
    for f in sorted((ROOT / "calibrate" / "twin").rglob("*.py")):
        assert "__main__" not in f.read_text(), f
    for f in sorted((ROOT / "calibrate" / "twin" / "diagnose").glob("[!_]*.py")):
        assert ".".join(f.relative_to(ROOT).with_suffix("").parts) in mods, f


def test_the_calibration_librarys_public_names_resolve_outside_the_study():
    """``calibrate.__all__`` is the library's surface: every name resolves, from a library module, not the study."""
    import calibrate
    for name in calibrate.__all__:
        obj = getattr(calibrate, name)
        where = getattr(obj, "__module__", None) or calibrate._WHERE[name]
        assert where.startswith("calibrate.") and not where.startswith("calibrate.twin"), (name, where)
