"""The broker's cost of an idempotent producer's send, without the network and the replicas
(docs/idempotence-cost.md).

One in-process lone broker (flush async); the send service's ``put`` (what the remoting and
gRPC fronts call, :meth:`broker.send.service.SendService.put`) of single sends of ``--size``
bytes (``--batch N``: batches of N) to a topic of 8 queues, round robin, in three modes
alternated for ``--rounds`` rounds in one process (the collector set as the broker daemon sets
it, :mod:`daemon.gc_tuning`):

* ``off``: no fields (what a send without idempotence costs);
* ``on``: the producer id, epoch and sequence (per queue), the broker's check, the
  ``__PSEQ`` value on the record, the window update and the kept answer;
* ``prop``: no fields but one ordinary property (what any property costs the store).

Each phase is ``--sends`` messages; its cost is the process's CPU time per message (the
machine is shared, so wall time would count the others' work). Printed per round and as medians with
on - off, and the median of each round's own on - off (its phases run back to back, so the load
drifts less between them than across the run; many short rounds resolve a microsecond where a
few long ones do not); ``--profile on`` (or ``off``) runs cProfile over one more phase of that
mode and prints its top functions.

``--front``: the remoting front instead of ``put`` alone: SEND_MESSAGE (or SEND_BATCH_MESSAGE)
frames, encoded beforehand, each decoded from its bytes and handed to the send processor's
handler (:class:`broker.processors.send.SendProcessor`: the typed request's parse, the usual
window or the front's check, ``put``, the answer), as a connection's frames are; ``on`` sends
carry ``producerSeq``, ``prop`` sends one ``properties`` field.

``--pollute BYTES``: after each put (or frame), write one byte in every 64 of a buffer of BYTES,
which pushes that much else out of the CPU's caches, as a broker's other work between two sends
of a queue does (its sockets, the replication, the other queues' sends): what a send costs when
what it touches is no longer cached. Every phase pays the writes; on - off does not.

    python bench/idempotent_put_bench.py [--rounds 5] [--sends 20000] [--size 1024]
        [--batch 1] [--front] [--pollute 2097152] [--profile on]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.processors.send import SendProcessor
from daemon.gc_tuning import tune_for_latency
from protocol.codes import RequestCode
from protocol.idempotence import ProducerSeq
from protocol.message import Message
from protocol.remoting import Scalar, decode_payload, encode_frame, request
from remoting.server import Connection
from tests.support.procs import free_port

TOPIC = "IdemPut"
QUEUES = 8
MODES = ("off", "on", "prop")


class _Peer:
    """What the send handler reads of its connection."""

    peer = "127.0.0.1:40000"


class Sender:
    """Puts (or, with ``front``, the handler's frames) of one mode; the sequences per queue go
    on across phases."""

    def __init__(
        self, broker: Broker, size: int, batch: int = 1, front: bool = False, pollute: int = 0
    ) -> None:
        self.sends = broker.ctx.sends
        self.handler = SendProcessor(broker.ctx)
        self.body = b"x" * size
        self.batch = batch
        self.front = front
        self.producer_id = 4242
        self.next_seq = [0] * QUEUES
        self.junk = bytearray(pollute)
        """Written one byte in 64 after each put (``--pollute``)."""
        self.zeros = bytes(len(self.junk[::64]))

    def phase(self, mode: str, n: int) -> float:
        """CPU seconds per message of ``n`` messages in ``mode``."""
        if self.front:
            return self._frames(mode, n)
        body = self.body
        size = self.batch
        n = max(1, n // size)
        if mode == "prop":
            messages = [
                [Message(topic=TOPIC, body=body, properties={"color": "red"}) for _ in range(size)]
                for _ in range(n)
            ]
        else:
            messages = [[Message(topic=TOPIC, body=body) for _ in range(size)] for _ in range(n)]
        seqs: list[ProducerSeq | None] = [None] * n
        if mode == "on":
            pid = self.producer_id
            nxt = self.next_seq
            for i in range(n):
                q = i % QUEUES
                seqs[i] = ProducerSeq(pid, 0, nxt[q])
                nxt[q] += 1
        put = self.sends.put
        junk, zeros = self.junk, self.zeros
        t0 = time.process_time()
        if junk:
            for i in range(n):
                put(TOPIC, i % QUEUES, messages[i], seqs[i])
                junk[::64] = zeros
        else:
            for i in range(n):
                put(TOPIC, i % QUEUES, messages[i], seqs[i])
        return (time.process_time() - t0) / (n * size)

    def _frames(self, mode: str, n: int) -> float:
        size = self.batch
        n = max(1, n // size)
        if size == 1:
            code, body = RequestCode.SEND_MESSAGE, self.body
            handle = self.handler.send_message
        else:
            code = RequestCode.SEND_BATCH_MESSAGE
            body = msgpack.packb([{"body": self.body}] * size)
            handle = self.handler.send_batch
        payloads: list[bytes] = []
        nxt = self.next_seq
        for i in range(n):
            q = i % QUEUES
            header: dict[str, Scalar] = {"topic": TOPIC, "queueId": q}
            if mode == "on":
                ProducerSeq(self.producer_id, 0, nxt[q]).add_to(header)
                nxt[q] += 1
            elif mode == "prop":
                header["properties"] = "color\x01red\x02"
            payloads.append(encode_frame(request(code, i, header, body))[4:])
        conn = cast(Connection, _Peer())
        junk, zeros = self.junk, self.zeros
        t0 = time.process_time()
        if junk:
            for payload in payloads:
                handle(conn, decode_payload(payload))
                junk[::64] = zeros
        else:
            for payload in payloads:
                handle(conn, decode_payload(payload))
        return (time.process_time() - t0) / (n * size)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="idempotent-put-bench-") as tmp:
        cfg = BrokerConfig(
            listen=f"127.0.0.1:{free_port()}",
            data_dir=Path(tmp) / "broker-a",
            metrics_port=0,
            flush="async",
            commitlog_segment_bytes=1 << 28,
        )
        broker = Broker(cfg)
        await broker.start()
        try:
            ctx = broker.ctx
            ctx.topics.load()
            ctx.create_topic(TOPIC, QUEUES)
            await ctx.sends.sequences.built()
            tune_for_latency()  # the collector as the broker daemon sets it
            sender = Sender(broker, args.size, args.batch, args.front, args.pollute)
            for mode in MODES:  # warm up: caches, the first segment's pages
                sender.phase(mode, min(args.sends, 2000))
            figures: dict[str, list[float]] = {m: [] for m in MODES}
            for r in range(args.rounds):
                line = []
                for mode in MODES:
                    us = sender.phase(mode, args.sends) * 1e6
                    figures[mode].append(us)
                    line.append(f"{mode} {us:.1f}")
                    await asyncio.sleep(0)  # the loop's own work between phases
                print(f"round {r + 1}: " + ", ".join(line) + " us a message", flush=True)
            if args.pollute:
                print(
                    f"each put followed by writes over {args.pollute:,} B of memory "
                    "(--pollute; in every mode's figures, not in on - off)",
                    flush=True,
                )
            med = {m: statistics.median(v) for m, v in figures.items()}
            print(
                f"median CPU per message ({args.rounds} rounds of {args.sends:,} in puts of "
                f"{args.batch}): "
                f"off {med['off']:.1f} us, on {med['on']:.1f} us, prop {med['prop']:.1f} us",
                flush=True,
            )
            paired = statistics.median(
                on - off for on, off in zip(figures["on"], figures["off"], strict=True)
            )
            print(
                f"on - off: {med['on'] - med['off']:+.1f} us a message, on/off "
                f"{med['on'] / med['off']:.3f}, median of the rounds' on - off {paired:+.2f} us; "
                f"load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                sender.phase(args.profile, args.sends)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        finally:
            await broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sends", type=int, default=20_000, help="messages per phase")
    p.add_argument("--batch", type=int, default=1, help="messages per put")
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument(
        "--front",
        action="store_true",
        help="time the remoting front (frames decoded and handled), not put alone",
    )
    p.add_argument(
        "--pollute",
        type=int,
        default=0,
        metavar="BYTES",
        help="after each put or frame, write one byte in every 64 of BYTES of memory (what the "
        "send touches then comes from beyond the caches)",
    )
    p.add_argument("--profile", choices=MODES, default=None, help="cProfile one more phase")
    args = smoke.parse_args(p, rounds=1, sends=300)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
