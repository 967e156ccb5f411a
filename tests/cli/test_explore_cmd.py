"""``litegpu explore``: Model Explorer node data written for a model, and the command that shows it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from litegpu.cli import explore_cmd
from litegpu.cli.main import main
from litegpu.compile.node_data import NodeData
from litegpu.ir import read_model
from litegpu.ir.builder import ModelBuilder
from litegpu.ir.save import write_model
from model_explorer_support import check_against_model_explorer


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def written(path: str | Path, name: str) -> NodeData:
    """A node-data file read back as NodeData, to check it against Model Explorer."""
    data = json.loads(Path(path).read_text())
    graphs = tuple(data)
    values = {(k, int(node)): r["value"] for k, g in enumerate(data.values()) for node, r in g["results"].items()}
    return NodeData(name, graphs, values)


def small_model(path: Path, file_format: str | None = None) -> Path:
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    h, y = b.tensor("h", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, b.constant("one", np.ones((2, 3), np.float32))], [h])
    b.op("TANH", [h], [y])
    b.output(y)
    write_model(b.build(), path, file_format=file_format)
    return path


def test_explore_writes_the_plans_node_data_and_prints_the_command(shared_models, tmp_path, capsys):
    model = shared_models / "two_signatures_float32.tflite"
    code, out, err = run_cli(capsys, "explore", str(model), "--kernel-mode", "builtin", "--out", str(tmp_path / "nd"),
                             "--no-browser")
    assert code == 0, err
    files = {p.stem: p for p in (tmp_path / "nd").glob("*.json")}
    assert set(files) == {"engine", "partition", "fallback"}
    engine = json.loads(files["engine"].read_text())
    assert {g: sorted(d["results"].values(), key=str)[0]["value"] for g, d in engine.items()} == {
        "decode": "XLA CPU", "encode": "XLA CPU"}
    command = shlex.split(out[out.index("model-explorer"):].splitlines()[0])
    assert command[:2] == ["model-explorer", str(model.resolve())]
    assert command[2] == "--node_data_paths=" + ",".join(str(files[n].resolve()) for n in ("engine", "partition",
                                                                                              "fallback"))
    check_against_model_explorer(written(files["engine"], "engine"), model)


def test_explore_measures_time_and_distance(tmp_path, capsys):
    model = small_model(tmp_path / "small.tflite")
    x = tmp_path / "x.npy"
    np.save(x, np.full((2, 3), 0.5, np.float32))
    code, out, err = run_cli(capsys, "explore", str(model), "--kernel-mode", "builtin", "--profile", "--compare-with",
                             "builtin", "--input", f"x={x}", "--out", str(tmp_path / "nd"), "--no-browser")
    assert code == 0, err
    time = json.loads((tmp_path / "nd" / "time.json").read_text())["main"]
    assert set(time["results"]) == {"0", "1"} and all(r["value"] > 0 for r in time["results"].values())
    distance = json.loads((tmp_path / "nd" / "distance.json").read_text())["main"]
    assert distance["results"] == {"0": {"value": 0.0}, "1": {"value": 0.0}}
    assert "distance from the builtin kernels (2 ops)" in " ".join(out.split())


def test_a_circle_model_is_shown_through_its_tflite_form(tmp_path, capsys):
    model = small_model(tmp_path / "small.circle", "circle")
    code, out, err = run_cli(capsys, "explore", str(model), "--out", str(tmp_path / "nd"), "--no-browser")
    assert code == 0, err
    shown = tmp_path / "nd" / "small.tflite"
    assert read_model(shown).file_format == "tflite" and read_model(shown) == read_model(model)
    assert f"model-explorer {shown.resolve()}" in out
    check_against_model_explorer(written(tmp_path / "nd" / "engine.json", "engine"), shown)


def test_a_circle_model_without_a_tflite_form_says_so(tmp_path, capsys):
    b = ModelBuilder()
    x = b.input("x", (2, 4))
    y = b.tensor("y", (2, 4))
    b.op("RMS_NORM", [x, b.constant("gamma", np.ones(4, np.float32))], [y])  # circle-only
    b.output(y)
    write_model(b.build(), tmp_path / "rms.circle")
    code, _, err = run_cli(capsys, "explore", str(tmp_path / "rms.circle"), "--out", str(tmp_path / "nd"),
                           "--no-browser")
    assert code == 2 and "Model Explorer reads .tflite only, and this circle model cannot be written as .tflite" in err


def test_without_model_explorer_it_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(explore_cmd, "model_explorer_installed", lambda: False)
    code, out, _ = run_cli(capsys, "explore", str(small_model(tmp_path / "m.tflite")), "--out", str(tmp_path / "nd"))
    assert code == 0 and "pip install 'litegpu[explore]'" in out and "model-explorer" in out
    assert (tmp_path / "nd" / "engine.json").is_file()  # the node data is written all the same


def test_bad_requests_are_one_line_each(tmp_path, capsys):
    model = small_model(tmp_path / "m.tflite")
    for argv, says in [((str(tmp_path / "missing.tflite"),), "no such file"),
                       ((str(model), "--input", "x=x.npy"), "--input is used by --compare-with and --profile"),
                       ((str(model), "--accelerator", "npu"), "expected cpu, gpu or gpu,cpu"),
                       ((str(model), "--compare-with", "builtin", "--signature", "nope"), "no signature 'nope'")]:
        code, _, err = run_cli(capsys, "explore", *argv, "--out", str(tmp_path / "nd"), "--no-browser")
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


# ---- in a real browser ------------------------------------------------------------------------

SERVE = """
import sys
from pathlib import Path
sys.modules["torch"] = None  # Model Explorer's PyTorch adapter is not needed here, and PyTorch takes 8 s to import
from litegpu.cli.explore_cmd import serve
serve(Path({shown!r}), [Path(f) for f in {files!r}], {port}, open_browser=False)
"""
BROWSER_TIMEOUT_S = 60
# the engines' colours (backends.registry's EngineInfo.overlay) as the overlay draws them
OPENVINO_BLUE, XLA_PURPLE = (0x00, 0x71, 0xC5), (0x8E, 0x24, 0xAA)


def free_loopback_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((explore_cmd.LOOPBACK, 0))
        return s.getsockname()[1]


def headless_chromium():
    """Debian's Chromium under Selenium, headless, software WebGL (Model Explorer draws with WebGL)."""
    import shutil

    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (litegpu[test])")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("needs Debian's headless Chromium: apt-get install -y chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                 "--enable-unsafe-swiftshader"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    browser.set_page_load_timeout(BROWSER_TIMEOUT_S)
    return browser


def wait_for(condition, what: str, timeout_s: float = BROWSER_TIMEOUT_S):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def pixels_near(image, rect: dict, color: tuple[int, int, int], tolerance: int = 12) -> int:
    """How many pixels of ``image`` inside ``rect`` have ``color``."""
    box = np.asarray(image.convert("RGB"))[int(rect["y"]):int(rect["y"] + rect["height"]),
                                           int(rect["x"]):int(rect["x"] + rect["width"])].astype(int)
    return int((np.abs(box - color).max(axis=2) <= tolerance).sum())


@pytest.mark.slow
def test_model_explorer_draws_the_overlay_in_a_real_browser(shared_models, tmp_path, without_litert):
    """``litegpu explore mediapipe_selfie_segmentation.tflite --compare-with builtin``: Model Explorer, served on the
    loopback address, opened in headless Chromium, shows the ops on OpenVINO and the custom op that fell back to
    XLA in their engines' colours, and the selected op's engine, why it fell back and its distance.  The screenshot
    is the README's (``LITEGPU_EXPLORE_SCREENSHOT=docs/explore.png`` writes it there)."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    from PIL import Image
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    if not explore_cmd.model_explorer_installed():
        pytest.skip(f"Model Explorer is not installed: {explore_cmd.INSTALL_HINT}")
    browser = headless_chromium()
    report = explore_cmd.explore(shared_models / "mediapipe_selfie_segmentation.tflite", out=tmp_path / "nd",
                                 compare_with="builtin")
    assert report["plan"]["engines"] == "242 ops on OpenVINO, 4 ops on XLA in 2 partitions"
    port, log = free_loopback_port(), tmp_path / "server.log"
    files = [report["files"][name] for name in ("engine", "fallback", "distance")]
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-c", SERVE.format(shown=report["shown"], files=files, port=port)],
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = wait_for(lambda: re.search(rf"http://{explore_cmd.LOOPBACK}:{port}/\?data=\S+", log.read_text()),
                       "Model Explorer's server").group(0)
        assert urllib.request.urlopen(f"http://{explore_cmd.LOOPBACK}:{port}/check_health", timeout=10).read() \
            == b"model_explorer_ok"
        browser.get(url)

        def provider(name: str):  # a node-data run listed in the side panel
            return next((e for e in browser.find_elements(By.XPATH, f"//*[normalize-space(text())='{name}']")
                         if e.rect["x"] > 1000 and e.rect["y"] < 400 and e.is_displayed()), None)

        wait_for(lambda: provider("engine"), "the node data in the side panel").click()
        search = browser.find_element(By.CSS_SELECTOR, "input[placeholder*='Search']")
        search.send_keys("Convolution2DTransposeBias", Keys.ENTER)
        wait_for(lambda: [e for e in browser.find_elements(
            By.XPATH, "//*[normalize-space(text())='Convolution2DTransposeBias']")
            if e.rect["x"] < 400 and e.rect["y"] > 100], "the search result")[0].click()  # zooms to the op
        canvas = browser.find_elements(By.TAG_NAME, "canvas")[0]
        rect, shot = canvas.rect, tmp_path / "explore.png"

        def drawn(color: tuple[int, int, int]) -> int:  # pixels of that colour on the graph now
            browser.save_screenshot(str(shot))
            return pixels_near(Image.open(shot), rect, color)

        wait_for(lambda: drawn(XLA_PURPLE) > 2000, "the custom op and its neighbours drawn in XLA's colour")
        next(e for e in browser.find_elements(By.CSS_SELECTOR, ".btn-clear-container") if e.is_displayed()).click()
        ActionChains(browser).move_to_element(canvas).click().perform()  # selects the op in the middle: the custom op
        panel = wait_for(lambda: "OpenVINO's TFLite frontend" in browser.page_source and browser.page_source,
                         "the selected op's node data")
        assert "XLA CPU" in panel and "distance from builtin" in panel
        assert drawn(XLA_PURPLE) > 2000 and drawn(OPENVINO_BLUE) > 1000, "the engines' colours are not drawn"
        if os.environ.get("LITEGPU_EXPLORE_SCREENSHOT"):  # 128 colours: a small PNG for the README
            Image.open(shot).convert("RGB").quantize(128, dither=Image.Dither.NONE).save(
                os.environ["LITEGPU_EXPLORE_SCREENSHOT"], optimize=True)
    except BaseException:
        browser.save_screenshot(str(tmp_path / "failed.png"))  # what the browser showed, for the report
        raise
    finally:
        browser.quit()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
