#!/usr/bin/env python3
"""Fetch recorded human speech for ``make eval-audio`` into ``models/recorded-speech/``, once (issue 43).

Debian's ``alsa-utils`` ships ``/usr/share/sounds/alsa/*.wav``: a recorded voice saying the name of
each speaker channel ("Front Center", "Rear Left", ...), each about 1.4 s, 16-bit mono 48 kHz WAV.
The file name says what is spoken. The package is downloaded with ``apt-get download`` (no install,
no root), unpacked with ``dpkg-deb -x`` in a temporary folder, and the eight voice clips (not
``Noise.wav``, which is noise) and Debian's copyright file are kept; each clip's sha256 is checked
(the clips, not the .deb, whose revision may move on within the release). Licence: GPL-2, as
Debian's copyright file for alsa-utils says of all its files (``Files: *``); the clips are fetched,
never committed. Standard library only, so it runs before any virtual environment exists.

Exit 0 when the clips are in place (fetched or already there), 1 otherwise (``apt-get download``
needs the package lists: ``apt-get update``, as the Makefile's step does when this fails).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fetch_split_model import say, sha256_of  # beside this script (standard library only)

PACKAGE = "alsa-utils"  # checked: 1.2.8-1 (bookworm)
SOUNDS = Path("usr/share/sounds/alsa")
COPYRIGHT = Path("usr/share/doc/alsa-utils/copyright")
CLIPS = {  # the recorded voice clips and the sha256 of each
    "Front_Center.wav": "0d61518bcd3f13b0c709a5298e939caf698b80d31d71d50475365ee0e5536cc9",
    "Front_Left.wav": "9f97e8458785da2f0aa0ec60bf9cc81520cbf80a4683e83eca9cb5f2958e9fef",
    "Front_Right.wav": "1fdea4d7003f1f7d3e48d3521aaab0a112c4ac570b02ddf1813abacac3070f6f",
    "Rear_Center.wav": "9343207e3298813fdc4d26b7948e15a38533c37a9f232c3eff809b565398b330",
    "Rear_Left.wav": "1679e0557701864d55b742a0abd3fe5f50d95b1bfcb55ffad4b597dcc7e3c7b8",
    "Rear_Right.wav": "12828d125f692faa75c7445d52125dcc2c36f82c4f7a3ef49b8ae6afd74ada9d",
    "Side_Left.wav": "03dc7c641d7825417d2a261831715e945e95d87343fb037db910e7ce4f87a2a1",
    "Side_Right.wav": "ecdd0329945f355960796a56f8126d5080ed93fdd2437c7eaddbbbd56137d7e9",
}


def verified(folder: Path) -> bool:
    return all((folder / name).is_file() and sha256_of(folder / name) == digest for name, digest in CLIPS.items())


def fetch(dest: Path) -> int:
    if verified(dest):
        say(f"{dest} present and verified (sha256 ok); reusing it")
        return 0
    with tempfile.TemporaryDirectory(prefix="recorded-speech-") as tmp:
        work = Path(tmp)
        say(f"downloading Debian's {PACKAGE} (apt-get download; nothing installed)")
        got = subprocess.run(["apt-get", "download", "-q", PACKAGE], cwd=work, check=False)
        debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if got.returncode != 0 or not debs:
            say(f"apt-get download {PACKAGE} failed (are the package lists there? apt-get update)")
            return 1
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(work / "x")], check=True)
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        for name in CLIPS:
            src = work / "x" / SOUNDS / name
            if src.is_file():
                shutil.copyfile(src, part / name)
        if (work / "x" / COPYRIGHT).is_file():
            shutil.copyfile(work / "x" / COPYRIGHT, part / "copyright")
        if not verified(part):
            shutil.rmtree(part)
            say(f"{debs[0].name} does not hold the expected clips (sha256); nothing kept")
            return 1
        shutil.rmtree(dest, ignore_errors=True)
        part.replace(dest)
    say(f"ready: {dest} ({len(CLIPS)} recorded clips from {debs[0].name}, sha256 verified)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path(__file__).resolve().parents[1] / "models" / "recorded-speech")
    return fetch(parser.parse_args().dest)


if __name__ == "__main__":
    sys.exit(main())
