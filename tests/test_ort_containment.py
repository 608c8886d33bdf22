"""onnxruntime runs in a child process: crashes, hangs and memory blow-ups end the child with a
one-line error naming the model (and node), the caller lives on, and the child is reused."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import onnx
import pytest

from conftest import REPO, SAMPLES
from ort_models import crashy, hungry, slow_feed, slow_loop, slow_twin
from workbench.runtime import runners
from workbench.runtime.equivalence import make_inputs, verify
from workbench.runtime.ortchild import (OrtChild, OrtCrashed, OrtError, OrtFailed, OrtLimitExceeded,
                                default_child, model_key, node_in_message)
from workbench.runtime.ortserver import load_arrays, save_arrays

RESNET = SAMPLES / "resnet_tiny.onnx"


def _kill_while_running(runner, feed, sig=signal.SIGSEGV, after=0.3):
    """Run `feed` in a thread and send `sig` to the onnxruntime child mid-run."""
    runner.start()
    pid = default_child().pid
    box = {}

    def go():
        try:
            box["out"] = runner.infer(feed)
        except Exception as e:  # what the caller sees
            box["error"] = e

    t = threading.Thread(target=go)
    t.start()
    time.sleep(after)
    os.kill(pid, sig)
    t.join(60)
    assert not t.is_alive()
    return pid, box


def test_results_match_in_process_and_the_child_is_reused():
    feed = make_inputs(onnx.load(str(RESNET)))
    inproc = runners.OnnxRuntimeRunner(RESNET, isolated=False).infer(feed)
    a = runners.OnnxRuntimeRunner(RESNET)
    out = a.infer(feed)
    child = default_child()
    pid, starts = child.pid, child.starts
    assert pid is not None and pid != os.getpid()
    assert a.isolated and np.array_equal(out["logits"], inproc["logits"])
    file_key = model_key(RESNET)[0]
    # the file's sessions now (earlier tests in this process may have left others, with
    # other options, in the shared child)
    of_file = {k for k in child.call("ping")["sessions"] if k.startswith(file_key)}
    assert of_file
    # a second runner on the same model, and a marked copy: same process, cached session
    b = runners.OnnxRuntimeRunner(RESNET)
    assert np.array_equal(b.infer(feed)["logits"], inproc["logits"])
    marked = runners.OnnxRuntimeRunner(RESNET, mark_all=True).infer(feed)
    assert np.array_equal(marked["logits"], inproc["logits"]) and len(marked) > 20
    assert (child.pid, child.starts) == (pid, starts)
    sessions = child.call("ping")["sessions"]
    assert len(sessions) == len(set(sessions))
    # the second runner on the file reused the first one's session: no new one
    assert {k for k in sessions if k.startswith(file_key)} == of_file


def test_transfer_folders_of_dead_processes_are_swept(tmp_path):
    import subprocess
    import sys

    from workbench.runtime.ortchild import FOLDER_PREFIX, _sweep

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"{FOLDER_PREFIX}{dead}-abc").mkdir()
    (tmp_path / f"{FOLDER_PREFIX}{dead}-abc" / "model-1.onnx").write_bytes(b"x")
    (tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-def").mkdir()  # alive: kept
    (tmp_path / "unrelated").mkdir()
    _sweep(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{FOLDER_PREFIX}{os.getppid()}-def", "unrelated"])


def test_sessions_dropped_from_the_child_cache_are_loaded_again():
    """More models than the child keeps (CACHE_SIZE): every runner still gets its outputs."""
    from workbench.runtime.ortserver import CACHE_SIZE

    feed = slow_feed(2)
    rs = []
    for k in range(CACHE_SIZE + 3):
        m = slow_loop()
        m.graph.name = f"loop{k}"  # a different model each time (another hash)
        r = runners.OnnxRuntimeRunner(m)
        r.infer(feed)
        rs.append(r)
    first = rs[0].infer(feed)["y"]  # its session left the child's cache long ago
    assert first.shape == (1, 64) and len(default_child().call("ping")["sessions"]) <= CACHE_SIZE


def test_a_crash_mid_run_is_one_line_error_and_the_next_call_works(monkeypatch):
    monkeypatch.setenv("WORKBENCH_ORT_LOCATE_S", "2")
    m = slow_loop()
    m.graph.name = "slow_loop"
    r = runners.OnnxRuntimeRunner(m)
    pid, box = _kill_while_running(r, slow_feed(10 ** 8))
    e = box.get("error")
    assert isinstance(e, OrtCrashed) and isinstance(e, OrtError), box
    text = str(e)
    assert "\n" not in text and "onnxruntime crashed (SIGSEGV) while running the model" in text
    assert text.startswith("model 'slow_loop'") and "your session is fine" in text
    assert e.returncode == -signal.SIGSEGV
    # this process lives on; a fresh child answers the next call
    out = runners.OnnxRuntimeRunner(m).infer(slow_feed(3))
    assert out["y"].shape == (1, 64) and default_child().pid not in (None, pid)


def test_a_segfaulting_custom_op_is_one_line_error_naming_model_and_node(crash_lib, monkeypatch):
    monkeypatch.setenv("WORKBENCH_ORT_CUSTOM_OPS", crash_lib)
    feed = {"x": np.ones((2, 4), np.float32)}
    before = default_child().starts
    with pytest.raises(OrtCrashed) as e:
        runners.OnnxRuntimeRunner(crashy()).infer(feed)
    text = str(e.value)
    assert "\n" not in text and e.value.node == "boom" and e.value.returncode == -signal.SIGSEGV
    assert not e.value.shared and "another model" not in text  # it ran alone in the child
    assert text.startswith("model 'crashy', node 'boom': onnxruntime crashed (SIGSEGV) while "
                           "running the model; a fresh process crashes again at node 'boom'")
    # the caller lives, and the library stays usable for healthy models in a fresh child
    out = runners.OnnxRuntimeRunner(RESNET).infer(make_inputs(onnx.load(str(RESNET))))
    assert out["logits"].shape[-1] == 10 and default_child().starts > before


def test_verify_reports_the_custom_op_crash_as_its_reason(crash_lib, monkeypatch):
    monkeypatch.setenv("WORKBENCH_ORT_CUSTOM_OPS", crash_lib)
    v = verify(crashy(), crashy(), {"x": np.ones((2, 4), np.float32)})
    assert v.status == "unverified" and "before the change" in v.reason
    assert "onnxruntime crashed (SIGSEGV)" in v.reason and "node 'boom'" in v.reason


def test_a_crash_that_does_not_repeat_names_no_node():
    """locate_crash re-runs the model in a fresh child first: a healthy run means no node is
    blamed, and a re-run past the budget gives up rather than hang."""
    from workbench.runtime.ortchild import locate_crash

    assert locate_crash(slow_loop(), slow_feed(3), budget_s=20) is None
    t0 = time.monotonic()
    assert locate_crash(slow_loop(), slow_feed(10 ** 8), budget_s=1.0) is None
    assert time.monotonic() - t0 < 5


def test_verification_reports_a_crash_as_a_reason(monkeypatch):
    """verify() (every recipe's check) turns the crash into an unverified/different verdict."""
    monkeypatch.setenv("WORKBENCH_ORT_LOCATE_S", "0")
    m = slow_loop()
    default_child().close()
    box = {}

    def go():
        box["v"] = verify(m, m, slow_feed(10 ** 8))

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 20
    while default_child().pid is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    os.kill(default_child().pid, signal.SIGABRT)
    t.join(60)
    v = box["v"]
    assert v.status == "unverified" and "onnxruntime crashed (SIGABRT)" in v.reason, v


def test_time_limit_stops_the_run_with_a_clear_error():
    r = runners.OnnxRuntimeRunner(slow_loop(), timeout=0.5)
    t0 = time.monotonic()
    with pytest.raises(OrtLimitExceeded, match=r"exceeded its time limit of 0.5 s while running "
                                                r"the model and was stopped"):
        r.infer(slow_feed(10 ** 8))
    assert time.monotonic() - t0 < 5
    assert runners.OnnxRuntimeRunner(slow_loop()).infer(slow_feed(2))["y"].shape == (1, 64)


def test_memory_limit_stops_the_run_with_a_clear_error():
    r = runners.OnnxRuntimeRunner(hungry(), max_rss=256 << 20)
    with pytest.raises(OrtLimitExceeded, match=r"over its memory limit of 256 MiB, while running"):
        r.infer({"n": np.array([2 ** 28], np.int64)})  # 1 GiB of ones
    small = runners.OnnxRuntimeRunner(hungry(), max_rss=256 << 20)
    assert float(small.infer({"n": np.array([1000], np.int64)})["total"]) == 1000.0


def test_address_space_limit_in_the_child(tmp_path):
    """With $WORKBENCH_ORT_ADDRESS_SPACE the child runs under RLIMIT_AS: a huge allocation fails
    inside onnxruntime (std::bad_alloc, named at its node), never in this process."""
    child = OrtChild(env={"WORKBENCH_ORT_ADDRESS_SPACE": str(3 << 30)}, max_rss=16 << 30)
    try:
        key, meta = child.load(hungry().SerializeToString())
        assert float(child.run(key, {"n": np.array([10], np.int64)}, ["total"])["total"]) == 10
        with pytest.raises(OrtFailed, match="bad_alloc") as e:
            child.run(key, {"n": np.array([2 ** 31], np.int64)}, ["total"])  # 8 GiB
        assert "\n" not in str(e.value) and e.value.node == "allocate"
        assert float(child.run(key, {"n": np.array([7], np.int64)}, ["total"])["total"]) == 7
    finally:
        child.close()


def test_onnxruntime_refusals_keep_their_own_text_and_name_the_node():
    """A model or feed onnxruntime refuses raises what an in-process run raises (its own text,
    so callers' explanations stay as they were), on one line, with the node it names."""
    feed = {"n": np.array([-5], np.int64)}
    with pytest.raises(Exception) as inproc:
        runners.OnnxRuntimeRunner(hungry(), isolated=False).infer(feed)
    with pytest.raises(OrtFailed) as e:
        runners.OnnxRuntimeRunner(hungry()).infer(feed)
    assert not isinstance(e.value, OrtError) and "\n" not in str(e.value)
    assert str(e.value) == " ".join(str(inproc.value).split())
    assert e.value.node == "allocate" and "ConstantOfShape node" in str(e.value)
    assert node_in_message("Non-zero status code returned while running MatMul node. "
                           "Name:'/fc/MatMul' Status Message: bad") == "/fc/MatMul"
    v = verify(hungry(), hungry(), feed)  # verify() words it as before
    assert v.status == "unverified" and v.reason.startswith(
        "onnxruntime cannot run the model before the change: [ONNXRuntimeError]")


def test_arrays_cross_as_raw_buffers_without_pickle(tmp_path):
    import ml_dtypes

    bf = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    items = [("bf", bf), ("s", np.array(["a", "bc"], dtype=object)), ("i", np.arange(5)),
             ("b", np.array([True, False])), ("scalar", np.float32(2.5)),
             ("empty", np.zeros((0, 3), np.float16))]
    specs = save_arrays(str(tmp_path / "blob"), items)
    assert all(s["offset"] % 64 == 0 for s in specs)
    back = load_arrays(str(tmp_path / "blob"), specs)
    assert back["bf"].dtype == bf.dtype and np.array_equal(back["bf"], bf)
    assert back["s"].tolist() == ["a", "bc"] and back["i"].tolist() == list(range(5))
    assert back["b"].tolist() == [True, False] and back["scalar"].shape == () \
        and float(back["scalar"]) == 2.5 and back["empty"].shape == (0, 3)
    with pytest.raises(ValueError, match="refused dtype 'O'"):  # never objects (pickle)
        load_arrays(str(tmp_path / "blob"), [dict(specs[2], dtype="O")])


class _Kernel:
    """A real Jupyter kernel (jupyter_client) running cells; `run` returns their output."""

    def __init__(self, env):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=env)

    def run(self, code, timeout=120):
        out = []

        def hook(msg):
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "execute_result":
                out.append(c["data"]["text/plain"])
            elif msg["msg_type"] == "error":
                out.append("ERROR " + c["ename"] + ": " + c["evalue"])
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok", out
        return "".join(out).strip()

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _open_compare_panel(kernel, model, inputs):
    return kernel.run("from widgets import ComparePanel\n"
                      f"panel = ComparePanel({str(model)!r}, {str(model)!r}, inputs={str(inputs)!r})\n"
                      "print(panel.busy)")


def _panel_result(kernel):
    busy, error = kernel.run("panel.wait(90)\nprint(panel.busy, '|', panel.error)",
                             timeout=120).split(" | ")
    return busy, error


def test_a_kernel_survives_an_onnxruntime_crash_in_compare_panel(tmp_path):
    """Acceptance: a real kernel runs a ComparePanel on a model whose onnxruntime run dies
    (SIGSEGV sent to the child mid-run); the panel shows one clear line and the kernel then
    answers `1+1`."""
    import psutil

    model = tmp_path / "slow.onnx"
    onnx.save(slow_loop(), model)
    np.savez(tmp_path / "in.npz", **slow_feed(10 ** 8))
    kernel = _Kernel(dict(os.environ, WORKBENCH_ORT_LOCATE_S="0"))
    try:
        kernel_pid = int(kernel.run("import os; print(os.getpid())"))
        assert _open_compare_panel(kernel, model, tmp_path / "in.npz") == "True"
        child = None
        deadline = time.monotonic() + 60
        while child is None and time.monotonic() < deadline:
            for p in psutil.Process(kernel_pid).children(recursive=True):
                if "workbench.runtime.ortserver" in " ".join(p.cmdline()):
                    child = p
            time.sleep(0.1)
        assert child is not None, "no onnxruntime child under the kernel"
        time.sleep(1.0)  # loaded, and inside the long run
        os.kill(child.pid, signal.SIGSEGV)
        busy, error = _panel_result(kernel)
        assert busy == "False" and "onnxruntime crashed (SIGSEGV)" in error and "\n" not in error
        assert error.startswith(f"{model}: ")  # the user's file (compare was given its path)
        assert kernel.run("1+1", timeout=10) == "2"
    finally:
        kernel.close()


def test_a_kernel_survives_a_segfaulting_custom_op_in_compare_panel(tmp_path, crash_lib):
    """Acceptance, with a real native crash: the custom op segfaults inside onnxruntime; the
    panel names the model and the node, the kernel answers `1+1`."""
    model = tmp_path / "crashy.onnx"
    onnx.save(crashy(), model)
    np.savez(tmp_path / "in.npz", x=np.ones((2, 4), np.float32))
    kernel = _Kernel(dict(os.environ, WORKBENCH_ORT_CUSTOM_OPS=crash_lib))
    try:
        assert _open_compare_panel(kernel, model, tmp_path / "in.npz") == "True"
        busy, error = _panel_result(kernel)
        assert busy == "False" and "\n" not in error
        assert error.startswith(f"{model}, node 'boom': onnxruntime crashed (SIGSEGV)")
        assert kernel.run("1+1", timeout=10) == "2"
    finally:
        kernel.close()


def _in_thread(fn):
    box = {}

    def go():
        try:
            box["out"] = fn()
        except Exception as e:  # what that caller sees
            box["error"] = e

    t = threading.Thread(target=go)
    t.start()
    return t, box


def test_requests_of_two_threads_run_side_by_side_in_the_child(monkeypatch):
    """A long run in one thread does not hold up another thread's loads and runs (the
    layer-wise compare streams both graphs at once); each caller gets its own answer."""
    monkeypatch.setenv("WORKBENCH_ORT_LOCATE_S", "0")
    feed = make_inputs(onnx.load(str(RESNET)))
    want = runners.OnnxRuntimeRunner(RESNET, isolated=False).infer(feed)["logits"]
    slow = runners.OnnxRuntimeRunner(slow_loop(), timeout=20)
    slow.start()
    pid = default_child().pid
    t, box = _in_thread(lambda: slow.infer(slow_feed(10 ** 9)))
    time.sleep(0.3)  # the long run is in the child now
    for _ in range(3):  # answered while it runs (a one-request-at-a-time child would wait 20 s)
        got = runners.OnnxRuntimeRunner(RESNET, threads=1).infer(feed)["logits"]
        assert np.array_equal(got, want)
    assert t.is_alive() and default_child().pid == pid
    default_child().kill()  # (end the long run)
    t.join(60)
    assert isinstance(box.get("error"), OrtCrashed)
    assert np.array_equal(runners.OnnxRuntimeRunner(RESNET).infer(feed)["logits"], want)


def test_a_crash_ends_every_request_in_flight_and_the_next_call_starts_afresh(monkeypatch):
    monkeypatch.setenv("WORKBENCH_ORT_LOCATE_S", "0")
    a = runners.OnnxRuntimeRunner(slow_loop(), timeout=60)
    b = runners.OnnxRuntimeRunner(slow_loop(32), timeout=60)
    a.start()
    b.start()
    pid = default_child().pid
    (ta, ba), (tb, bb) = (_in_thread(lambda: a.infer(slow_feed(10 ** 9))),
                          _in_thread(lambda: b.infer(slow_feed(10 ** 9, 32))))
    time.sleep(0.5)
    os.kill(pid, signal.SIGSEGV)
    ta.join(60)
    tb.join(60)
    for box in (ba, bb):
        assert isinstance(box.get("error"), OrtCrashed), box
        assert "onnxruntime crashed (SIGSEGV)" in str(box["error"])
    y = runners.OnnxRuntimeRunner(slow_loop()).infer(slow_feed(2))["y"]
    assert y.shape == (1, 64) and default_child().pid not in (None, pid)


def test_child_allocator_reuses_freed_tensors_unless_the_caller_says_otherwise():
    from workbench.runtime.ortchild import MALLOC_ENV

    child = OrtChild(env={"MALLOC_ARENA_MAX": "4"})
    try:
        child.call("ping")
        environ = dict(kv.split("=", 1) for kv in
                       open(f"/proc/{child.pid}/environ").read().split("\0") if "=" in kv)
    finally:
        child.close()
    assert environ["MALLOC_ARENA_MAX"] == "4"  # the caller's setting wins
    for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        assert environ[k] == MALLOC_ENV[k] == str(32 << 20)


def test_outputs_fed_back_are_read_where_they_lie_and_their_folder_goes_with_them(tmp_path):
    """A run's output fed to a later run (a segment's tensors the next segments read) is named
    by file and offset, not written out again; its run folder lives as long as its arrays."""
    import gc

    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"], name="neg")], "neg",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    child = OrtChild()
    try:
        key, _ = child.load(m.SerializeToString())
        x = np.arange(15, dtype=np.float32).reshape(3, 5)
        first = child.run(key, {"x": x}, ["y"])["y"]
        runs = lambda: [n for n in os.listdir(child.folder) if n.startswith("run-")]  # noqa: E731
        assert len(runs()) == 1  # kept while `first` lives
        spec = child._mapped_spec("x", first)
        assert spec is not None and spec["file"].endswith("out.bin")
        assert child._mapped_spec("x", first.copy()) is None  # not a view of a run's output
        second = child.run(key, {"x": first}, ["y"], reuse=True)["y"]
        np.testing.assert_array_equal(second, x)
        first[0, 0] = 100.0  # written by the caller: without reuse, its own values go
        np.testing.assert_array_equal(child.run(key, {"x": first}, ["y"])["y"][0, 0], -100.0)
        # the child refuses feed files outside the caller's transfer folder
        outside = tmp_path / "out.bin"
        outside.write_bytes(x.tobytes())
        bad = dict(spec, file=str(outside), offset=0)
        os.makedirs(os.path.join(child.folder, "run-x"))
        with pytest.raises(OrtFailed, match="outside the transfer folder"):
            child.call("run", {"key": key, "feed": [bad], "outputs": ["y"],
                               "dir": os.path.join(child.folder, "run-x")})
        del first, second
        gc.collect()
        assert runs() == ["run-x"]  # the runs' folders went with their arrays
    finally:
        child.close()


def test_a_compare_blames_the_model_that_crashed_the_shared_child(crash_lib, monkeypatch,
                                                                   tmp_path):
    """Both models of a layer-wise compare run in the one child; the candidate's custom op
    kills it while the (healthy, slow) reference is mid-run. The error names the candidate
    and its node - the crash that repeats in a fresh process - not the reference that
    happened to be read first; the reference's own error says the crash may not be its."""
    from workbench import compare

    monkeypatch.setenv("WORKBENCH_ORT_CUSTOM_OPS", crash_lib)
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(slow_twin(), str(ref))
    onnx.save(crashy(), str(cand))
    feeds = [{"x": np.ones((2, 4), np.float32)}]
    with pytest.raises(OrtCrashed) as e:
        compare.layerwise(str(ref), str(cand), feeds, candidate_runner="onnxruntime")
    line = e.value.one_line()
    assert e.value.node == "boom" and e.value.shared
    assert line.startswith(f"{cand}, node 'boom': onnxruntime crashed (SIGSEGV)"), line


def test_a_crash_under_two_runs_says_it_may_be_the_other_model(monkeypatch):
    """Two runs in the child when it dies (killed): each error says another model was running
    and the crash may be that model's (neither crash repeats in a fresh process)."""
    monkeypatch.setenv("WORKBENCH_ORT_LOCATE", "5")
    a, b = runners.OnnxRuntimeRunner(slow_twin()), runners.OnnxRuntimeRunner(slow_twin(999_999))
    a.start()
    b.start()
    pid = default_child().pid
    errors = []

    def go(r):
        try:
            r.infer({"x": np.ones((2, 4), np.float32)})
        except OrtCrashed as e:
            errors.append(e)
    ts = [threading.Thread(target=go, args=(r,)) for r in (a, b)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    os.kill(pid, signal.SIGSEGV)
    for t in ts:
        t.join(60)
    assert len(errors) == 2
    for e in errors:
        assert e.shared and e.node is None
        assert "another model was running in the same onnxruntime child" in e.one_line()


def test_a_run_stopped_for_another_runs_memory_limit_is_run_again():
    """One run goes past its memory limit and the child is stopped; a slow run beside it in
    the same child is not reported as a crash (SIGKILL): it runs again in a fresh child and
    gives its answer, and the hungry run's error names its limit."""
    from workbench.runtime.ortchild import OrtStopped

    slow = runners.OnnxRuntimeRunner(slow_twin(3_000_000))
    slow.start()
    box = {}

    def go():
        try:
            box["out"] = slow.infer({"x": np.ones((2, 4), np.float32)})
        except Exception as e:  # what the caller would see
            box["error"] = e
    t = threading.Thread(target=go)
    t.start()
    time.sleep(0.3)  # the loop is running
    pid = default_child().pid
    with pytest.raises(OrtLimitExceeded, match="over its memory limit of 256 MiB"):
        runners.OnnxRuntimeRunner(hungry(), max_rss=256 << 20).infer(
            {"n": np.array([2 ** 28], np.int64)})
    t.join(60)
    assert not t.is_alive() and "error" not in box, box.get("error")
    assert box["out"]["y"].shape == (2, 4) and np.isfinite(box["out"]["y"]).all()
    assert default_child().pid not in (None, pid)  # answered by a fresh child
    # what the stopped run hears before it runs again, from the child itself
    child = OrtChild(max_rss=16 << 30)
    try:
        k_slow, _ = child.load(slow_twin(3_000_000).SerializeToString())
        k_big, _ = child.load(hungry().SerializeToString())
        heard = {}

        def bystander():
            try:
                child.run(k_slow, {"x": np.ones((2, 4), np.float32)}, ["y"])
            except Exception as e:
                heard["error"] = e
        t = threading.Thread(target=bystander)
        t.start()
        time.sleep(0.3)
        with pytest.raises(OrtLimitExceeded):
            child.run(k_big, {"n": np.array([2 ** 28], np.int64)}, ["total"],
                      max_rss=256 << 20)
        t.join(60)
        e = heard.get("error")
        assert isinstance(e, OrtStopped) and not isinstance(e, OrtCrashed)
        assert "another run in the same child went past its memory limit of 256 MiB" in str(e)
    finally:
        child.close()


def test_the_child_starts_from_any_folder(tmp_path):
    """The onnxruntime child and the TensorRT worker start without site packages (-S): they find
    the `workbench` package by the path the parent hands them, not by the folder they start in.
    A process started outside the repository (a notebook elsewhere, a user's project) must get
    results, not "No module named 'workbench'"."""
    import subprocess
    import sys

    code = ("import numpy as np, onnx\n"
            "from workbench.runtime import runners\n"
            "from workbench.runtime.equivalence import make_inputs\n"
            f"m = {str(RESNET)!r}\n"
            "feed = make_inputs(onnx.load(m))\n"
            "a = runners.OnnxRuntimeRunner(m).infer(feed)\n"
            "b = runners.OnnxRuntimeRunner(m, isolated=False).infer(feed)\n"
            "assert np.array_equal(a['logits'], b['logits'])\n"
            "from workbench.worker.launch import ROOT\n"
            "import workbench, os\n"
            "assert os.path.dirname(os.path.dirname(os.path.realpath(workbench.__file__))) == ROOT\n"
            "print('ok')\n")
    # as a user's process: workbench found through the installed package, no PYTHONPATH
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=env)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
