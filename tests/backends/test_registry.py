"""The engine registry: an engine is one module and one registry line (issue 36).

A small numpy engine written here is registered with one ``register`` call and nothing else, and the runtime
(``CompiledModel``), the plan's report, ``litegpu doctor`` and ``litegpu inspect`` all use it; and no engine is
named in ``runtime/``, ``compile/`` or ``cli/`` beyond what the registry derives.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import litegpu
from litegpu.backends import registry
from litegpu.backends.engine import Engine, EngineContext, EngineInfo, EngineSettings, Executable
from litegpu.backends.graph import OpRange
from litegpu.cli.main import main
from litegpu.errors import InvalidArgumentError
from litegpu.ir import Model, numpy_dtype
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import to_bytes
from litegpu.ops import Target

SRC = Path(litegpu.__file__).resolve().parent
TOY_OPS = {"ADD": np.add, "MUL": np.multiply}


class ToyExecutable(Executable):
    """ADD and MUL in numpy, op by op; counts its runs."""

    runs = 0

    def __init__(self, model: Model, op_range: OpRange):
        self.model, self.op_range = model, op_range

    def run(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        ToyExecutable.runs += 1
        sg = self.model.subgraphs[self.op_range.subgraph]
        values = {t: np.asarray(x) for t, x in zip(self.op_range.inputs, inputs)}
        for i in self.op_range.op_indices:
            op = sg.operators[i]
            a, b = (values[t] if t in values else np.asarray(sg.tensors[t].data) for t in op.inputs)
            values[op.outputs[0]] = TOY_OPS[op.opcode_name](a, b).astype(numpy_dtype(sg.tensors[op.outputs[0]].dtype))
        return [values[t] for t in self.op_range.outputs]


class ToyEngine(Engine):
    """A CPU engine that runs ADD and MUL, converting them itself (as OpenVINO does: the planner asks it)."""

    name, target = "toy", Target.REFERENCE

    def __init__(self, settings: EngineSettings | None = None):
        self.settings = settings or EngineSettings()

    @classmethod
    def create(cls, settings: EngineSettings | None, context: EngineContext) -> "ToyEngine":
        return cls(settings)

    @classmethod
    def device_rows(cls, earlier: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"device": "Toy board", "detail": "numpy on the host", "engines": "toy"}]

    def available(self) -> bool:
        return True

    def unsupported(self, model: Model, subgraph: int, op_indices: Sequence[int]) -> dict[int, str]:
        sg = model.subgraphs[subgraph]
        return {i: "the toy engine runs ADD and MUL only" for i in op_indices
                if sg.operators[i].opcode_name not in TOY_OPS}

    def compile(self, model: Model, op_range: OpRange, settings: EngineSettings, cache: Any = None,
                cache_key: dict | None = None) -> Executable:
        return ToyExecutable(model, op_range)

    def describe(self) -> str:
        return f"toy engine, numpy {np.__version__}"


TOY = EngineInfo("toy", "the Toy engine", "CPU: ADD and MUL in numpy (a test's engine)", "nothing to install",
                 ToyEngine, (Target.REFERENCE,), fast_cpu="ops")


@pytest.fixture
def toy():
    registry.register(TOY)  # the one line a new engine takes
    ToyExecutable.runs = 0
    yield TOY
    registry.unregister(TOY.name)


def toy_model() -> bytes:
    """y = (x + x) * x + 1"""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    one = b.constant("one", np.ones((2, 3), np.float32))
    h, m, y = b.tensor("h", (2, 3)), b.tensor("m", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, x], [h])
    b.op("MUL", [h, x], [m])
    b.op("ADD", [m, one], [y])
    b.output(y)
    return to_bytes(b.build())


def toy_options(**kwargs: Any) -> litegpu.Options:
    return litegpu.Options(litegpu.HardwareAccelerator.CPU, cpu_options=litegpu.CpuOptions(engines=("toy",)),
                           **kwargs)


def test_a_registered_engine_runs_a_compiled_model(toy, tmp_path):
    model = litegpu.CompiledModel.from_buffer(toy_model(), options=toy_options(compile_cache=False))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = model(x)
    np.testing.assert_array_equal(y, (x + x) * x + 1)
    assert ToyExecutable.runs == 1  # the toy's executable ran it, nothing else
    plan = model.plan
    assert plan.engine == "toy" and {p.engine for p in plan.partitions} == {"toy"}
    assert plan.engine_summary() == "3 ops on the Toy engine in 1 partition"


def test_the_options_take_a_registered_engine_by_name_and_refuse_an_unknown_one(toy):
    assert litegpu.CpuOptions(engines=("toy", "litert")).engines == ("toy", "litert")
    registry.unregister("toy")
    with pytest.raises(InvalidArgumentError, match="unknown engine.*toy"):
        litegpu.CpuOptions(engines=("toy",))


def test_doctor_reports_a_registered_engine_and_its_devices(toy, capsys):
    assert main(["doctor", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    (row,) = [e for e in info["engines"] if e["engine"] == "toy"]
    assert row["available"] and row["role"] == TOY.role and row["detail"].startswith("toy engine")
    assert {"device": "Toy board", "detail": "numpy on the host", "engines": "toy"} in info["devices"]
    assert "toy" in info["devices"][0]["engines"]  # a CPU engine


def test_inspect_plans_with_a_registered_engine(toy, tmp_path, capsys):
    path = tmp_path / "toy.tflite"
    path.write_bytes(toy_model())
    assert main(["inspect", str(path), "--accelerator", "cpu", "--engines", "toy", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert [(p["engine"], p["ops"]) for p in plan["partitions"]] == [("toy", 3)]
    assert plan["engines"] == "3 ops on the Toy engine in 1 partition"


def test_an_op_the_engine_refuses_runs_on_the_exact_kernels(toy):
    """A model where the toy refuses an op: it keeps the ops it takes when they are the whole model, else they go
    to XLA with the refused one (too little work for a partition of its own)."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    h, y = b.tensor("h", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, x], [h])
    b.op("TANH", [h], [y])
    b.output(y)
    model = litegpu.CompiledModel.from_buffer(to_bytes(b.build()), options=toy_options(compile_cache=False))
    x_value = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(model(x_value), np.tanh(x_value + x_value), rtol=1e-6)
    assert "toy" not in model.plan.ops_per_engine() and ToyExecutable.runs == 0


def test_every_table_of_engines_comes_from_the_registry():
    assert registry.named(fast_cpu=True) == ("litert", "openvino")
    assert registry.named(device="GPU") == ("xla", "iree")
    assert litegpu.GpuOptions(engine="iree").engine == "iree"
    for name, info in registry.ENGINES.items():
        engine = registry.engine(name)
        assert engine.name == name and engine.target in info.targets and engine.info is info
        assert registry.name_of(info.targets[0]) == name
    with pytest.raises(InvalidArgumentError, match="unknown engine 'npu'"):
        registry.engine("npu")


# ---- no engine named outside its module and the registry ---------------------------------------------------------

# The engines' modules and packages in backends/: what runtime/, compile/ and cli/ import none of.  They reach
# engines through the registry and the interface of ``backends.engine`` (optional capabilities included:
# ``Engine.weights``, ``profile_ops``, ``policy_refusals``, ``SubgraphProgram.decode_loop``, ``batched_decode``), and
# what several engines speak through engine-neutral modules (``backends.device_arrays``, ``backends.decoding``).
ENGINE_MODULES = {"litert", "openvino", "iree", "xla", "reference"}
# The XLA engine's modules that hold its state and programs: only the engine reaches them.
XLA_ENGINE_MODULES = {"engine", "backend", "state"}
# Engine names as string literals: the registry's names of the engines ("reference" is also a word of the reports:
# reference outputs, the reference kernels).
INTERFACE_ENGINES = {"litert", "openvino", "iree", "xla"}


def _engine_imports(tree: ast.AST) -> set[str]:
    """The engines whose modules an import names: ``backends.xla.backend``, ``backends.iree``, ``backends import
    litert``..."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "backends" in node.module.split("."):
            parts = node.module.split(".")
            below = parts[parts.index("backends") + 1:]
            if below and below[0] in ENGINE_MODULES:
                found.add(below[0])
            if not below:
                found |= {a.name for a in node.names if a.name in ENGINE_MODULES}
        elif isinstance(node, ast.Import):  # import litegpu.backends.xla.generate
            for alias in node.names:
                parts = alias.name.split(".")
                below = parts[parts.index("backends") + 1:] if "backends" in parts else []
                found |= set(below[:1]) & ENGINE_MODULES
    return found


def _source_files() -> list[Path]:
    return sorted(p for folder in ("runtime", "compile", "cli") for p in (SRC / folder).rglob("*.py"))


def _imports_by_file(imports_of) -> dict[str, set[str]]:
    """File (relative to the package) -> what ``imports_of`` finds in it, for the files where it finds some."""
    found = {}
    for path in _source_files():
        imports = imports_of(ast.parse(path.read_text()))
        if imports:
            found[path.relative_to(SRC).as_posix()] = imports
    return found


def test_runtime_compile_and_cli_import_no_engine_module():
    assert _imports_by_file(_engine_imports) == {}


def _xla_engine_module_imports(tree: ast.AST) -> set[str]:
    """The modules of the XLA package an import names among ``XLA_ENGINE_MODULES``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "backends" in node.module.split("."):
            parts = node.module.split(".")
            below = parts[parts.index("backends") + 1:]
            if below[:1] == ["xla"]:
                found |= set(below[1:2]) & XLA_ENGINE_MODULES if len(below) > 1 else \
                    {a.name for a in node.names} & XLA_ENGINE_MODULES
    return found


def test_runtime_compile_and_cli_reach_xla_and_the_reference_only_through_the_engine():
    assert _imports_by_file(_xla_engine_module_imports) == {}
    tree = ast.parse("from ..backends.xla.state import S\nfrom ..backends.xla import engine\n"
                     "from ..backends.xla.device import jax_module")
    assert _xla_engine_module_imports(tree) == {"state", "engine"}


def test_runtime_compile_and_cli_name_no_interface_engine():
    named = {}
    for path in _source_files():
        tree = ast.parse(path.read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in INTERFACE_ENGINES}
        members = {n.attr for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Target"
                   and n.attr.lower() in INTERFACE_ENGINES}
        if strings | members:
            named[path.relative_to(SRC).as_posix()] = strings | members
    assert named == {}


def test_the_checks_see_an_engine_import_and_an_engine_name():
    """The two checks above would pass on a broken walk: these must be found."""
    tree = ast.parse("from ..backends.openvino import X\nfrom ..backends import iree\nfrom ..backends.xla.backend "
                     "import Y\nfrom ..backends import registry\nimport litegpu.backends.litert\nx = 'litert'\n"
                     "y = Target.IREE")
    assert _engine_imports(tree) == {"openvino", "iree", "xla", "litert"}
    assert {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)} == {"litert"}
