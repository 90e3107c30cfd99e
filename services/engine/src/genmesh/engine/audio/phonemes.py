"""Text to IPA phonemes through Debian's ``espeak-ng``: one process per request, however many
sentences it holds. espeak-ng reads its input a line at a time (each line on its own, at most 999
bytes) and writes one line per clause; the request's sentences go one a line, with a marker line
between them (a phoneme string, ``[[...]]``, no English text pronounces: ``ʑʑʑ``), so each
sentence's clauses are known. Text cannot write the marker: a ``[[`` in it is spaced out."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess

from .chunking import sentences

ESPEAK_TIMEOUT_S = 30.0
LINE_CHARS = 240  # 4 bytes a character at most: a line is under espeak-ng's 999 bytes
MARKER = "[[Z;Z;Z;]]"
_PHONEME_INPUT = re.compile(r"\[(?=\[)")


class PhonemesError(Exception):
    """espeak-ng's output could not be matched to the text's sentences."""


class Phonemizer:
    def __init__(self, voice: str) -> None:
        """``voice``: espeak-ng's voice (a Piper voice's ``espeak.voice``); checks espeak-ng runs."""
        espeak = shutil.which("espeak-ng")
        if espeak is None:
            raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
        self.argv = [espeak, "-q", "--ipa", "-v", voice]
        done = subprocess.run(self.argv, input="a\n", capture_output=True, text=True, timeout=ESPEAK_TIMEOUT_S)
        if done.returncode != 0 or not done.stdout.strip():
            raise RuntimeError(f"espeak-ng cannot speak voice {voice!r}: {done.stderr.strip()[-200:]}")
        # the marker's own line, as this espeak-ng writes it
        done = subprocess.run(self.argv, input=MARKER + "\n", capture_output=True, text=True, timeout=ESPEAK_TIMEOUT_S)
        self.marker = done.stdout.strip()
        if not self.marker:
            raise RuntimeError(f"espeak-ng wrote nothing for the marker {MARKER}")
        self.processes = 0  # espeak-ng processes started for requests (tests count them)

    async def phonemes(self, text: str) -> list[str]:
        """Each sentence of ``text`` (``chunking.sentences``, a line each) as IPA: its clauses joined by
        ``, ``, ended by its own ``.``, ``!`` or ``?`` (else ``.``); a sentence with nothing to say is
        left out."""
        said = sentences(text.replace("\r", " ").replace("\n", " "), LINE_CHARS)
        if not said:
            return []
        lines = f"\n{MARKER}\n".join(_PHONEME_INPUT.sub("[ ", s) for s in said) + "\n"
        out = await self._run(lines)
        groups: list[list[str]] = [[]]
        for line in out.splitlines():
            line = line.strip()
            if line == self.marker:
                groups.append([])
            elif line:
                groups[-1].append(line)
        if len(groups) != len(said):
            raise PhonemesError(f"espeak-ng wrote {len(groups)} sentences for {len(said)}")
        return [", ".join(clauses) + _end(sentence) for sentence, clauses in zip(said, groups, strict=True) if clauses]

    async def _run(self, lines: str) -> str:
        self.processes += 1
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(lines.encode()), ESPEAK_TIMEOUT_S)
        except BaseException:  # timed out, or the request went away
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"espeak-ng failed ({proc.returncode}): {err.decode(errors='replace')[-200:]}")
        return out.decode()


def _end(sentence: str) -> str:
    last = sentence[-1:]
    return last if last in ".!?" else "."
