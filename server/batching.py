"""The scheduler: the one thread that runs the model, batching the decode steps of every active session.

Each loop: take new requests; when no newcomer is prefilling, admit the first waiting request (park idle sessions
if its KV peak does not fit under the memory cap, else it keeps waiting, and a request that can never fit is
refused); run ONE prefill chunk (chunk_size tokens) of the newcomer; then one decode step for all decoding sessions
in one batched forward (kvstore.session.batch), each session evicting on its own. So a long newcomer's prefill is spread
over many loops, each followed by a decode step of the others, instead of stalling them for its whole length
(`interleave_prefill=False`: the whole prefill at admission, as before). The chunks are those of a solo prefill,
so every session's cache and tokens are the same either way. Other work on the model (a served calibration:
server.calls) also runs here, one step per loop.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace
from functools import partial
from typing import Any

from kvstore.cache.evicting import model_identity
from kvstore.profiles.profile import load_profiles
from kvstore.session.batch import batched_decode, can_batch
from kvstore.session.reply import ReplyInProgress
from kvstore.session.session import Session
from server import api, heap
from server.admission import session_lost, take_slot
from server.calls import Calls
from server.config import ServeConfig, ServeError, internal_error, request_failed, scheduler_failed, shutting_down
from server.jobs import Job, result_of
from server.memory import bytes_per_token, cache_bytes, turn_peak_bytes
from server.messages import Said, cut_at_stop
from server.metrics import Metrics
from server.parking import park, restore
from server.sessions import Entry, Registry

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}  # kvstore finish reason -> OpenAI's


class Scheduler(threading.Thread):
    """Owns the model; HTTP threads `submit` jobs and read each job's events."""

    def __init__(self, model, tokenizer, config: ServeConfig, registry: Registry, metrics: Metrics) -> None:
        super().__init__(name="nexus-scheduler", daemon=True)

        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.registry, self.metrics = registry, metrics
        self.session_config = config.session_config()  # every session's memory, built once
        profile = config.memory.profile
        if profile is not None:  # a missing, corrupt or foreign profile stops the server before it listens
            load_profiles(profile, model_identity(model))
        self.reference = Session(model, tokenizer, self.session_config)  # renders and sizes turns, never runs
        self.per_token = bytes_per_token(model)
        # a padding mask needs sdpa or eager attention: flash-attention models decode one session at a time
        self.batch_ok = config.max_batch > 1 and "flash" not in model.config._attn_implementation
        self.inbox: queue.Queue[Job] = queue.Queue()
        self.calls = Calls()  # other work on the model, run on this thread (call)
        self.waiting: list[Job] = []
        self.active: list[Job] = []  # admitted jobs: decoding, or the one prefilling
        self.prefilling: Job | None = None  # the newcomer whose prefill runs chunk by chunk between decode steps
        self._halt = threading.Event()  # not `_stop`: threading.Thread has a method of that name
        self._intake = threading.Lock()
        self._closed = False  # no new work taken (a shutdown: its drain, then the stop)
        self._open: set[int] = set()  # ids of the jobs submitted and not yet answered (their last event not put)
        self.on_stop: list = []  # callables(scheduler) run on this thread after its loop ends (_wind_down)
        self.on_death: list = []  # callables() run on this thread last when its loop died (the server shuts down)
        self.failure: BaseException | None = None  # what ended the loop, when something did
        self.trim = heap.IdleTrim()  # returns freed host memory to the system when idle

    def submit(self, job: Job) -> None:
        """Queue `job`'s turn (ServeError 503 `server_shutdown` once the intake is closed)."""
        with self._intake:
            if self._closed:
                raise self.refusal()
            self._open.add(id(job))
            self.inbox.put(job)

    def call(self, fn):
        """Run `fn(model, tokenizer)` on this thread (the model is this thread's alone) and return its result, or
        raise what it raised. A plain function runs whole between two loops, the decoding sessions waiting
        meanwhile; a generator function runs one step per loop, between their decode steps (server.calls)."""
        if self.stopping:
            raise self.refusal()
        return self.calls.wait(fn, lambda: self.inbox.put(None), lambda: self.is_alive() and not self._halt.is_set())

    def close_intake(self) -> None:
        """Take no new work (submit and call refuse it); what was submitted before runs on (a shutdown's drain)."""
        with self._intake:
            self._closed = True

    def stop(self) -> None:
        self.close_intake()
        self._halt.set()
        self.inbox.put(None)  # wake the loop

    def refusal(self) -> ServeError:
        """What new work gets once the intake is closed: 503, naming the scheduler's failure if it died."""
        return shutting_down() if self.failure is None else scheduler_failed(self.failure)

    @property
    def stopping(self) -> bool:
        """Whether the intake is closed (a shutdown began: its drain, or `stop`, after which the loop ends after its
        current step)."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Turns submitted and not yet answered: queued, prefilling or decoding (what a shutdown's drain waits for)."""
        return len(self._open)

    @property
    def queued(self) -> int:
        return len(self.waiting) + self.inbox.qsize()

    def run(self) -> None:
        """The loop, supervised: every step on one request's data fails that request alone (a 400 or 500), so an
        exception that still reaches here is the loop's own. Then the scheduler is dead: the intake closes, every
        request in flight gets a 503 naming the failure, the idle sessions are parked (on_stop) for the next start,
        and `on_death` shuts the server down (its process exits non-zero: server.app)."""
        try:
            while not self._halt.is_set():
                self.loop_once()
                if not self.active and not self.waiting:
                    c = self.metrics.counters  # what frees memory: turns ending, sessions parked or closed
                    self.trim((c.get("turns_total", 0), c.get("sessions_parked_total", 0), self.registry.closed_total))
        except BaseException as exc:  # noqa: BLE001 - recorded, reported, and the server shuts down
            self.failure = exc
            internal_error(exc)  # its traceback, on stderr
            self.close_intake()
        self._wind_down()
        if self.failure is not None:
            for hook in self.on_death:
                hook()

    def _wind_down(self) -> None:
        """The scheduler's last act, on this thread once its loop is over (server shutdown, or its failure): every
        request still waiting or decoding ends with an error (its stream with an error event), then the `on_stop`
        hooks run (e.g. keeping the idle sessions), with the model still this thread's alone. Each step is guarded:
        what one cannot do does not keep the others from being done."""
        self._take(block=False)
        gone = self.refusal()
        for job in list(self.active) + self.waiting:
            _guarded(self._fail, job, gone)
        self.waiting, self.prefilling = [], None
        for hook in self.on_stop:
            _guarded(hook, self)

    def loop_once(self) -> None:
        """One scheduler loop: intake, admission, one prefill chunk of the newcomer, one decode step of the others."""
        self._take(block=not self.active and not self.waiting and not self.calls.busy)
        # Calls (a calibration) leave most of the time to turns that decode or prefill (server.calls), not to a waiting
        # one: it may be waiting for the memory a calibration holds.
        busy = self.prefilling is not None or any(j.reply.next_input is not None for j in self.active)
        self.calls.run(self.model, self.tokenizer, contended=busy)
        if self.prefilling is None:
            self._admit()
        self._expire_waiting()
        if self.prefilling is not None:
            self._prefill_chunk(self.prefilling)
        if any(j.reply.next_input is not None for j in self.active):
            self._step()
        elif self.waiting and self.prefilling is None:
            time.sleep(0.005)

    # --- intake and admission ---------------------------------------------------------------------------------------
    def _take(self, block: bool) -> None:
        try:
            job = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
            while True:
                if job is not None:
                    self.waiting.append(job)
                job = self.inbox.get_nowait()
        except queue.Empty:
            return

    def _expire_waiting(self) -> None:
        now = time.monotonic()
        for job in [j for j in self.waiting if j.cancelled or now - j.submitted > self.config.queue_timeout_s]:
            self.waiting.remove(job)
            self._fail(job, ServeError(
                f"server busy: waited {now - job.submitted:.0f} s for KV memory, a batch or a session slot "
                f"({len(self.active)} sessions decoding); retry later", 503, "server_busy",
            ))  # fmt: skip

    def _admit(self) -> None:
        """Start the first waiting job if a batch slot and its KV memory are free (FIFO, so no one starves)."""
        if not self.waiting or len(self.active) >= self.config.max_batch:
            return
        job = self.waiting.pop(0)
        try:
            if not self._make_room(job):
                self.waiting.insert(0, job)
                return
            self._start(job)
        except ServeError as exc:
            self._fail(job, exc)
        except Exception as exc:  # noqa: BLE001 - a request must never take the scheduler down
            self._fail(job, request_failed(exc, "admission"))  # kvstore's errors: a conversation it cannot take, 400

    def _make_room(self, job: Job) -> bool:
        """Reserve the job's KV peak under the cap, parking idle sessions (least recently used first)."""
        lost = lambda j: (self.waiting.remove(j), self._abort(j, session_lost(j.entry)))  # noqa: E731 - its park failed
        if not take_slot(self.registry, job, self.waiting, self.metrics, lost):  # every resident session decodes
            return False
        cap = self.config.memory_cap
        job.reserved = turn_peak_bytes(job, self.reference, self.config, self.per_token)
        if cap is None:
            return True
        if job.reserved > cap:
            raise ServeError(
                f"this request needs up to {job.reserved / 2**20:.1f} MiB of KV cache, more than the server's whole "
                f"memory cap of {cap / 2**20:.1f} MiB; send a shorter conversation or fewer max_tokens", 503,
                "kv_memory_exceeded",
            )  # fmt: skip
        return self._free(job.reserved, cap, job.entry)

    def _free(self, need: int, cap: int, keep: Entry | None = None) -> bool:
        """Park idle sessions (least recently used first, never `keep`) until `need` more bytes fit under `cap`."""
        idle = [e for e in self.registry.idle_resident() if e is not keep]
        in_use = sum(j.reserved for j in self.active) + sum(e.held_bytes for e in idle) + self.calls.reserved
        while in_use + need > cap and idle:
            victim = idle.pop(0)
            in_use -= victim.held_bytes
            park(victim, self.config.park, self.registry)
            self.metrics.add("sessions_parked_total")
        return in_use + need <= cap

    def room_for_full_cache(self, tokens: int, what: str) -> None:
        """On this thread, from a call (`call`) that holds a full cache of `tokens` tokens beside the sessions (a
        calibration): make room under the memory cap by parking idle sessions and set it aside until the call
        ends, so that admission does not take it back between its steps; ServeError 503 when it cannot fit."""
        cap, need = self.config.memory_cap, tokens * self.per_token
        if cap is None:
            return
        if self._free(need, cap):
            if self.calls.current is not None:
                self.calls.current.reserved = need
            return
        raise ServeError(
            f"{what} needs {need / 2**20:.1f} MiB of KV cache ({tokens} tokens) and the memory cap of "
            f"{cap / 2**20:.1f} MiB cannot hold it beside the sessions decoding now; retry later, or send shorter "
            "conversations or a smaller max_tokens", 503, "kv_memory_exceeded",
        )  # fmt: skip

    # --- turns ------------------------------------------------------------------------------------------------------
    def _start(self, job: Job) -> None:

        entry = job.entry
        job.started = time.monotonic()
        options = api.reply_options(job.request, job.constraint) if job.request is not None else {}
        if entry.parked is not None:
            restore(entry, self.model, self.tokenizer, self._config_of(entry))
            job.restored = True
            self.metrics.add("sessions_restored_total")
        if entry.session is None:
            entry.session = Session(self.model, self.tokenizer, self._config_of(entry))
        self.active.append(job)
        prepared = job.prepared.encoder(entry.session.renderer) if job.prepared is not None else None
        entry.session.append(job.messages, encode=prepared)
        job.reply = ReplyInProgress(
            entry.session, job.max_new_tokens, temperature=job.temperature, top_p=job.top_p, stop=job.stop,
            on_token=partial(_put_text, job.events), **options,  # no closure over the job: no job-reply cycle
        )  # fmt: skip
        job.reply.begin_prefill()
        self.prefilling = job
        if not self.config.interleave_prefill:
            while self.prefilling is job:
                self._prefill_chunk(job)

    def _prefill_chunk(self, job: Job) -> None:
        """The next chunk of the newcomer's prefill; once it is over the job decodes with the others."""
        if job.cancelled:
            self.prefilling = None
            self._abort(job, None)
            return
        t0 = time.perf_counter()
        try:
            done = job.reply.prefill_chunk()
        except Exception as exc:  # noqa: BLE001 - a request must never take the scheduler down
            self.prefilling = None
            self._abort(job, request_failed(exc, "prefill"))
            return
        finally:
            self.metrics.add("prefill_seconds_total", time.perf_counter() - t0)
        self.metrics.add("prefill_chunks_total")
        if not done:
            return
        self.prefilling = None
        self.metrics.add("tokens_prefilled_total", job.reply.prefill_tokens)
        self.metrics.add("tokens_generated_total", 1)
        job.first_token = time.monotonic()
        if job.reply.next_input is None:
            self._finish(job)

    def _config_of(self, entry: Entry):
        return replace(self.session_config, seed=entry.seed)

    def _step(self) -> None:
        """One decode step of every active reply: batched where the caches allow, else one by one."""

        t0 = time.perf_counter()
        rows = [j for j in self.active if j.reply.next_input is not None and not j.cancelled]
        if self.prefilling is not None:
            self.metrics.add("decode_steps_during_prefill_total")
        batch = [j for j in rows if self.batch_ok and can_batch(j.entry.session.cache)]
        alone = [j for j in rows if j not in batch or len(batch) == 1]
        batch = [j for j in batch if j not in alone]
        try:
            if batch:
                logits = batched_decode(
                    self.model, [j.entry.session.cache for j in batch], [j.reply.next_input for j in batch]
                )
                for j, row in zip(batch, logits, strict=True):
                    j.reply.advance(row)
            for j in alone:
                j.reply.step_alone()
        except Exception as exc:  # noqa: BLE001 - every reply of the failed step is lost, the server lives on
            error = internal_error(exc, "decode")
            for j in rows:
                self._abort(j, error)
            return
        for j in rows:
            j.batch_rows += len(rows)
        self.metrics.decoded(len(rows), len(rows))
        self.metrics.add("decode_seconds_total", time.perf_counter() - t0)
        for j in list(self.active):
            if j is self.prefilling:
                continue
            if j.cancelled:
                self._abort(j, None)
            elif j.reply.finish_reason is not None:
                self._finish(j)

    def _finish(self, job: Job) -> None:
        """The reply is over: answer it. What fails on its data (its text parsed for tool calls, its messages
        canonicalised for the transcript) fails this request alone, with a 500."""
        try:
            self._deliver(job)
        except Exception as exc:  # noqa: BLE001 - a request must never take the scheduler down
            self._abort(job, internal_error(exc, "finish"))

    def _deliver(self, job: Job) -> None:
        entry, session = job.entry, job.entry.session
        reply = job.reply.finish()
        self.active.remove(job)
        session.logits = None  # [V] floats an idle session never reads again: its next turn prefills first
        entry.held_bytes = cache_bytes(session.cache)
        entry.history_tokens = len(session.tokens)
        text = cut_at_stop(reply.text, job.stop) if reply.finish_reason == "stop" else reply.text
        records = job.reply.logprobs[:-1] if reply.finish_reason == "eos" else job.reply.logprobs
        answer = api.answer(job.request, text, FINISH[reply.finish_reason], records, self.tokenizer)
        returned = {"role": "assistant", "content": answer["text"] or "", "tool_calls": answer["tool_calls"]}
        self.registry.release(entry, [Said.of(m) for m in job.messages] + [Said.of(returned, job.stop)])
        self.metrics.add("turns_total")
        self._answer(job, ("done", result_of(job, reply, answer)))

    def _abort(self, job: Job, error: ServeError | None) -> None:
        """A reply cut short: its session is closed (its history no longer matches what the client saw)."""
        if job in self.active:
            self.active.remove(job)
        if job.reply is not None and job.reply.finish_reason is None:
            job.reply.abort()
        self.registry.release(job.entry, None)
        self._answer(job, None if error is None else ("error", error))

    def _fail(self, job: Job, error: ServeError) -> None:
        if job in self.active:
            self._abort(job, error)
            return
        self.registry.release(job.entry, None if job.reply is not None or not job.entry.transcript else [])
        self._answer(job, ("error", error))

    def _answer(self, job: Job, event: tuple[str, Any] | None) -> None:
        """The job's last event (None: its client went away), after its session was released: the job is over."""
        if event is not None:
            job.events.put(event)
        with self._intake:
            self._open.discard(id(job))


def _put_text(events, piece: str) -> None:
    events.put(("text", piece))


def _guarded(fn, *args) -> None:
    """`fn(*args)`, its exception printed rather than raised (the steps of a wind-down)."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - the wind-down goes on
        internal_error(exc)
