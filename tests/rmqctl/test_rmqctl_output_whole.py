"""rmqctl's output reaches a pipe whole. With PYTHONUNBUFFERED (set in this environment and by the
test helpers) sys.stdout writes straight to the descriptor, and a write(2) that takes only part
of a large document (a full pipe: 64 KiB) used to drop the rest silently: queryMsgByKey and
queryMsgByTime printed a cut JSON document at 64 or 128 KiB with exit status 0, in about one
run of ten under uvloop. Here stdout is what PYTHONUNBUFFERED makes of it (a TextIOWrapper over
the raw file, write-through) on a non-blocking pipe, so every write past a pipeful is short."""

from __future__ import annotations

import io
import json
import os
import sys
import threading

import pytest

from rmqctl.common import Settings, emit, write_stdout


def _pipe_stdout(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[io.TextIOWrapper, bytearray, threading.Thread]:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8", write_through=True)
    monkeypatch.setattr(sys, "stdout", stream)
    got = bytearray()

    def drain() -> None:
        with io.FileIO(read_end, "r") as pipe:
            while chunk := pipe.read(4096):
                got.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return stream, got, reader


def test_a_document_many_pipefuls_long_arrives_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, got, reader = _pipe_stdout(monkeypatch)
    doc = {"messages": [{"msgId": f"{i:032X}", "body": "é" * 90} for i in range(4000)]}
    emit(Settings(json=True), doc, lambda: "")
    stream.close()
    reader.join(30)
    assert not reader.is_alive()
    assert len(got) > 10 * 65536
    assert json.loads(got) == doc


def test_human_output_and_consumed_lines_arrive_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, got, reader = _pipe_stdout(monkeypatch)
    lines = [f"line {i} " + "x" * 200 for i in range(3000)]
    emit(Settings(json=False), None, lambda: "\n".join(lines[:1500]))
    write_stdout("\n".join(lines[1500:]) + "\n")
    stream.close()
    reader.join(30)
    assert got.decode().splitlines() == lines
