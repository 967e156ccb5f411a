"""Helpers the commands share: progress on stderr, the command line's words in messages, counts."""

import argparse
import time

import pytest

from litegpu.cli import common


def test_a_long_step_says_what_it_does_on_stderr_when_it_is_not_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(common, "QUIET_STEP_S", 0.01)
    with common.step("compiling for the builtin kernels"):
        time.sleep(0.2)
    with common.step("a quick one"):
        pass
    time.sleep(0.05)
    out, err = capsys.readouterr()
    assert out == "" and err == "litegpu: compiling for the builtin kernels ...\n"


def test_messages_name_the_command_lines_flags():
    said = common.in_cli_words("m.tflite: HardwareAccelerator.GPU was requested, but JAX sees no GPU; use "
                               "HardwareAccelerator.GPU | HardwareAccelerator.CPU to fall back to the CPU")
    assert said == ("m.tflite: --accelerator gpu was asked for, but JAX sees no GPU; use --accelerator gpu,cpu to "
                    "fall back to the CPU")
    assert common.in_cli_words("The builtin kernels' numbers: --kernel-mode builtin "
                               "(CpuOptions(kernel_mode=CpuKernelMode.BUILTIN))") == \
        "The builtin kernels' numbers: --kernel-mode builtin"


def test_counts_refuse_what_is_below_their_minimum():
    assert common.count(0)("0") == 0
    for text in ("-3", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.count(0)(text)
