"""Why an engine core process ended, in words, and whether a new core would end the same way.

A core killed by a signal is named by the signal (``SIGFPE``, not "exit code -8") and by when it
died: while loading the model (the core's last log line, ``loading ... on CPU``, says what it was
doing) or while serving. A core that dies of SIGFPE or SIGILL while loading the model is not
replaced: the same load on the same CPU with the same config dies the same way (an arithmetic
trap or an instruction the CPU lacks), so the server exits, saying why, instead of looping.
"""

from __future__ import annotations

import signal

# A core killed by one of these before it was ready dies again: no restart cures it.
CERTAIN_TO_REPEAT = frozenset({signal.SIGFPE, signal.SIGILL})
EXIT_LOAD_CRASH = 70  # EX_SOFTWARE: the server exits; restarting it as it is will not help
HINTS = {
    signal.SIGFPE: "OpenVINO dies like this on one inference thread in bf16 on CPUs with AMX "
    "(openvinotoolkit/openvino#33300): see docs/one-inference-thread.md",
    signal.SIGILL: "the CPU lacks an instruction the OpenVINO build uses",
}


def exit_signal(code: int | None) -> signal.Signals | None:
    """The signal a process exit status (``multiprocessing``'s: negative for a signal) names."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code)
    except ValueError:
        return None


def describe_exit(code: int | None, loading: bool) -> str:
    """One line: how the core ended, and when."""
    when = "while loading the model" if loading else "while serving"
    sig = exit_signal(code)
    if sig is None:
        what = f"signal {-code}" if code is not None and code < 0 else None
        return f"engine core process exited ({what or f'exit code {code}'}) {when}"
    text = f"engine core process exited: killed by {sig.name} ({signal.strsignal(sig)}; exit code {code}) {when}"
    if loading:
        text += " (the last genmesh.engine.core log line above shows the step it died in)"
    hint = HINTS.get(sig)
    return f"{text}; {hint}" if hint else text


def certain_to_repeat(code: int | None, loading: bool) -> bool:
    """A new core with the same config would die the same way."""
    return loading and exit_signal(code) in CERTAIN_TO_REPEAT
