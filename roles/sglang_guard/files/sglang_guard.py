"""sglang-guard: ask every replica real questions on a schedule; take the bad ones out of the router.

A NaN-poisoned sglang keeps ``/health`` at 200 and answers ``!!!!``; neither sglang nor the router (smg) looks
at what a replica answers. This daemon runs on the router host. It:

1. reads the router's worker list (``GET /workers``, admin key) and the drain markers (holds) that the rolling
   update writes to ``hold_dir`` (one file per held replica, its URL on the first line) every ``router_poll``
   seconds (default 1: one request whatever the fleet's size);
2. asks each replica that is not held the inference-check probes (``judge_probes``) every ``interval``
   seconds on the replica's own schedule, at most ``workers`` replicas at once, straight at its
   ``/v1/chat/completions`` (not through the router), and judges the answers with ``judge_verdict``, the
   judge of the ``sglang_inference_check`` Ansible module, with the module's request shape and retries. A
   replica whose check is still running is not asked again, and no replica waits for another's answer;
3. lets ``guard_policy`` decide the moment a verdict arrives, and at every router poll (out after
   ``fail_after`` failed verdicts in a row, or at once when the router reports a replica's engine unhealthy;
   back after ``recover_after`` passes whoever took it out, so a router restarted empty is refilled; the one
   removal policy of the guard and the validate gate: degenerate answers always out, a probe every replica
   fails with sound answers suspected instead of the replicas, at most ``max_removal_fraction`` of the
   replicas out per interval, never the last healthy replica; never a held one);
4. calls the router (``DELETE /workers/{id}``, ``POST /workers``), writes one journal line per verdict,
   transition and alert to stdout, updates the Prometheus metrics (``glm5_guard_*``) and saves its state
   atomically.

When the router listing or the holds cannot be read, the replicas are still judged and reported, but the
router is left alone until they can.

Usage: ``sglang_guard.py --config /etc/sglang-guard/guard.json [--once]``. ``--once`` runs one cycle (every
replica once, router actions included; the cycle counts as one interval for the cap), prints the states as
JSON and exits 0; it starts no metrics server.

Secrets come only from the environment (a systemd EnvironmentFile), never from the config:
``SGLANG_GUARD_ROUTER_ADMIN_KEY`` (router admin API), ``SGLANG_GUARD_SERVER_API_KEY`` (Bearer for the
replicas' ``/v1``; may be empty), ``SGLANG_GUARD_WORKER_API_KEY`` (``api_key`` of ``POST /workers``; may be
empty). They are never logged, printed, saved or exported: every line and label goes through
``guard_policy.scrub`` with them.

This file is the loop, its decisions' actions on the router and its saved state. Beside it, by concern:
``guard_config.py`` (the configuration and the secrets), ``guard_transport.py`` (HTTP with a deadline, one
replica's check, the router's listing and the holds), ``guard_metrics.py`` (the Prometheus metrics); and the
modules it shares with the collection's module_utils: ``judge_probes.py``, ``judge_verdict.py``,
``fleet_topology.py`` and ``guard_policy.py`` (``__sglang_guard_code`` in the role's vars/main.yml).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fleet_topology
import guard_policy
import judge_probes
from guard_config import DEFAULT_CONFIG, Config, ConfigError, Secrets, load_config
from guard_metrics import Metrics
from guard_transport import (
    ROUTER_TIMEOUT,
    ReplicaCheck,
    check_replica,
    next_tick,
    read_holds,
    registered_urls,
    router_healthy_urls,
    send_once,
)

ERROR_BODY_CHARS = 200  # characters of a router error body quoted in a journal line
STATE_VERSION = 1
OK_REMOVE = (200, 202, 204)
OK_ADD = (200, 201, 202)

# --- The guard


@dataclass
class CycleReport:
    """What one cycle saw and did."""

    router_up: bool
    states: dict[str, guard_policy.ReplicaState]
    checks: dict[str, ReplicaCheck]
    actions: list[guard_policy.Action]
    done: list[tuple[guard_policy.Action, bool, str]]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``--once`` prints)."""
        return {
            "router_up": self.router_up,
            "cycle_seconds": round(self.seconds, 3),
            "states": {url: state.to_dict() for url, state in self.states.items()},
            "actions": [
                {"kind": a.kind, "replica": a.url, "reason": a.reason, "ok": ok, "detail": detail}
                for a, ok, detail in self.done
            ],
            "checks": {url: check.summary() for url, check in self.checks.items()},
        }


class Guard:
    """The daemon's state and its I/O around ``guard_policy``. One :meth:`cycle` is one tick."""

    def __init__(
        self,
        config: Config,
        secrets: Secrets,
        *,
        metrics: Metrics | None = None,
        out: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        retries: int = judge_probes.DEFAULT_RETRIES,
        retry_delay: float = judge_probes.DEFAULT_RETRY_DELAY,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.metrics = metrics
        self.out = out  # where journal lines go; None: stdout
        self.stop = stop or threading.Event()
        self.retries = retries
        self.retry_delay = retry_delay
        self.clock = clock
        self.states: dict[str, guard_policy.ReplicaState] = {
            url: guard_policy.ReplicaState(url=url) for url in config.replicas
        }
        self.monotonic = monotonic
        self.router_up = False
        self.abandoned = 0  # probe threads left running by a stop in the middle of a cycle
        self.listing: dict[str, Any] | None = None  # the router's last GET /workers answer (None: unreadable)
        self.registered: set[str] | None = (
            None  # URLs it lists and is not draining, as far as the guard knows
        )
        self.unhealthy: set[str] = set()  # registered, reported unhealthy after having been reported healthy
        self.seen_healthy: set[str] = set()  # registered and reported healthy since registered
        self.held: set[str] = set()
        self.removals: list[float] = []  # monotonic times of the capped removals (the cap's sliding window)
        self.cap = guard_policy.removal_cap(len(config.replicas), config.max_removal_fraction)
        self._logged: dict[str, float] = {}  # line -> when log_once wrote it

    # -- output and state

    def log(self, line: str) -> None:
        """One journal line on stdout (or to ``out``), secrets and key-looking strings scrubbed."""
        text = guard_policy.clip(guard_policy.scrub(line, self.secrets.values()), 2000)
        if self.out is not None:
            self.out(text)
        else:
            print(text, flush=True)

    def log_once(self, line: str) -> None:
        """:meth:`log`, but the same line at most once per ``interval`` (the router is read every second)."""
        now = self.monotonic()
        self._logged = {text: at for text, at in self._logged.items() if now - at < self.config.interval}
        if line not in self._logged:
            self._logged[line] = now
            self.log(line)

    def load_state(self) -> None:
        """Load the saved states of the configured replicas (streaks and counters survive a restart)."""
        path = Path(self.config.state_file)
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self.log(f"state: cannot read {path} ({type(exc).__name__}); starting from scratch")
            return
        replicas = saved.get("replicas") if isinstance(saved, Mapping) else None
        if not isinstance(replicas, Mapping):
            self.log(f"state: {path} holds no replica states; starting from scratch")
            return
        for url in self.config.replicas:
            entry = replicas.get(url)
            if isinstance(entry, Mapping):
                self.states[url] = guard_policy.ReplicaState.from_dict(entry, url=url)
        removed = [url for url, state in self.states.items() if state.removed_by_guard]
        self.log(f"state: loaded from {path}; taken out by the guard: {', '.join(removed) or 'none'}")

    def save_state(self) -> None:
        """Write the states to ``state_file`` atomically (temporary file, fsync, rename)."""
        path = Path(self.config.state_file)
        document = {
            "version": STATE_VERSION,
            "saved_at": self.clock(),
            "replicas": {url: state.to_dict() for url, state in self.states.items()},
        }
        text = json.dumps(scrub_data(document, self.secrets.values()), indent=2, sort_keys=True)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self.log(f"state: cannot write {path}: {exc.strerror or exc}")

    # -- router

    def _admin_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.secrets.router_admin_key:
            headers["Authorization"] = f"Bearer {self.secrets.router_admin_key}"
        return headers

    def _router_timeout(self) -> float:
        return min(ROUTER_TIMEOUT, self.config.timeout)

    def read_router(self) -> tuple[dict[str, Any] | None, str | None]:
        """(the ``GET /workers`` answer, None) or (None, why it could not be read)."""
        url = f"{self.config.router_url}/workers"
        answer = send_once(
            "GET", url, self._admin_headers(), timeout=self._router_timeout(), verify=self.config.verify
        )
        if answer.error is not None:
            return None, answer.error
        if answer.status != 200:
            return None, f"GET /workers answered HTTP {answer.status}{_excerpt(answer.body)}"
        try:
            listing = json.loads(answer.body)
        except ValueError:
            return None, "GET /workers answered something that is not JSON"
        if not isinstance(listing, dict) or not isinstance(listing.get("workers"), list):
            return None, "GET /workers answered JSON without a 'workers' list"
        return listing, None

    def execute(self, action: guard_policy.Action, listing: Mapping[str, Any]) -> tuple[bool, str]:
        """Make the router call for a ``remove`` or ``add``: (done, detail)."""
        base = self.config.router_url
        timeout, verify = self._router_timeout(), self.config.verify
        if action.kind == guard_policy.REMOVE:
            worker = fleet_topology.find_worker(listing, action.url)
            if worker is None:  # registered since the last poll (the guard put it back): read again
                fresh = self.read_router()[0]
                worker = fleet_topology.find_worker(fresh or {}, action.url)
            if worker is None or "id" not in worker:
                return False, "the router no longer lists it (someone else took it out)"
            worker_id = urllib.parse.quote(str(worker["id"]), safe="")
            answer = send_once(
                "DELETE", f"{base}/workers/{worker_id}", self._admin_headers(), timeout=timeout, verify=verify
            )
            if answer.error is not None:
                return False, answer.error
            if answer.status in OK_REMOVE:
                return True, f"HTTP {answer.status}"
            return False, f"DELETE /workers/{{id}} answered HTTP {answer.status}{_excerpt(answer.body)}"
        if action.kind == guard_policy.ADD:
            payload: dict[str, str] = {"url": action.url}
            if self.secrets.worker_api_key:
                payload["api_key"] = self.secrets.worker_api_key
            answer = send_once(
                "POST", f"{base}/workers", self._admin_headers(), payload, timeout=timeout, verify=verify
            )
            if answer.error is not None:
                return False, answer.error
            if answer.status in OK_ADD:
                return True, f"HTTP {answer.status}"
            if answer.status == 409:
                return True, "HTTP 409: already registered"
            return False, f"POST /workers answered HTTP {answer.status}{_excerpt(answer.body)}"
        return True, ""

    # -- probes

    def check(self, url: str) -> ReplicaCheck:
        """Probe one replica with the configured probes."""
        config = self.config
        try:
            return check_replica(
                url,
                config.probes,
                api_key=self.secrets.server_api_key,
                model=config.model,
                logprobs=config.logprobs,
                timeout=config.timeout,
                verify=config.replica_verify,
                retries=self.retries,
                retry_delay=self.retry_delay,
                stop=self.stop,
            )
        except Exception as exc:  # a bug must not cost the verdicts of the others
            return ReplicaCheck(url, False, f"the guard could not check it ({type(exc).__name__}: {exc})")

    def probe_all(self, urls: Sequence[str]) -> dict[str, ReplicaCheck] | None:
        """Probe the replicas concurrently (at most ``workers`` at once); None when a stop was requested
        before they all answered."""
        if not urls:
            return {}
        workers = min(self.config.workers, len(urls))
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="guard-probe")
        futures = {executor.submit(self.check, url): url for url in urls}
        pending = set(futures)
        while pending:
            pending = wait_futures(pending, timeout=0.5)[1]
            if pending and self.stop.is_set():
                self.abandoned = len(pending)
                executor.shutdown(wait=False, cancel_futures=True)
                return None
        executor.shutdown(wait=True)
        return {url: future.result() for future, url in futures.items()}

    # -- the router's word and the holds

    def poll(self) -> None:
        """Read the router's worker list and the holds into ``listing``, ``registered``, ``unhealthy`` and
        ``held`` (``registered`` None when either cannot be read: no router actions then)."""
        config = self.config
        listing, router_error = self.read_router()
        if router_error is not None:
            self.log_once(
                f"router unreachable at {config.router_url}: {router_error}; no router actions this cycle"
            )
        self.listing = listing
        self.router_up = listing is not None
        registered = registered_urls(listing) if listing is not None else None
        if listing is not None and registered is not None:
            healthy_now = router_healthy_urls(listing) & registered
            self.seen_healthy = (self.seen_healthy & registered) | healthy_now
            self.unhealthy = (registered - healthy_now) & self.seen_healthy
        holds, problems = read_holds(config.hold_dir)
        for problem in problems:
            self.log_once(f"holds: {problem}")
        if holds is None:
            self.log_once("holds: unknown, so no router actions this cycle")
            registered = None
        self.held = {url for url in config.replicas if url in (holds or ())}
        self.registered = registered

    # -- decisions

    def decide(
        self,
        checks: Mapping[str, ReplicaCheck],
        fresh: set[str] | None,
        budget: int | None = None,
    ) -> tuple[list[guard_policy.Action], list[tuple[guard_policy.Action, bool, str]]]:
        """Apply the policy to the verdicts of ``checks`` (the replicas in ``fresh`` may be acted on; None:
        all), make the router calls, log, export, save. Returns (actions, done)."""
        config = self.config
        secrets = self.secrets.values()
        verdicts: dict[str, tuple[bool, str, guard_policy.Judgement]] = {}
        for url, check in checks.items():
            check.symptom = guard_policy.scrub(check.symptom, secrets)
            judgement = guard_policy.Judgement.from_probes(check.passed, check.probes)
            verdicts[url] = (check.passed, check.symptom, judgement)
        if budget is None:
            budget = guard_policy.removal_budget(self.removals, self.monotonic(), config.interval, self.cap)
        decision = guard_policy.decide_cycle(
            self.states,
            verdicts,
            self.registered,
            self.held,
            config.fail_after,
            config.recover_after,
            now=self.clock(),
            replicas=config.replicas,
            budget=budget,
            cap=self.cap,
            unhealthy=self.unhealthy,
            fresh=fresh,
        )
        for line in decision.lines:
            self.log(line)
        states = decision.states
        done: list[tuple[guard_policy.Action, bool, str]] = []
        for action in decision.actions:
            if action.kind == guard_policy.ALERT:
                done.append((action, True, ""))
                continue
            ok, detail = self.execute(action, self.listing or {})
            done.append((action, ok, guard_policy.scrub(detail, secrets)))
            states[action.url], lines = guard_policy.apply_outcome(states[action.url], action, ok, detail)
            for line in lines:
                self.log(line)
            if ok and self.registered is not None:  # what the router lists now, until the next poll
                if action.kind == guard_policy.REMOVE:
                    self.registered.discard(action.url)
                    self.unhealthy.discard(action.url)
                    if action.capped:
                        self.removals.append(self.monotonic())
                else:
                    self.registered.add(action.url)
        self.removals = [t for t in self.removals if self.monotonic() - t < config.interval]
        self.states = states
        if self.metrics is not None:
            self.metrics.update(states, self.router_up, self.cap)
        if checks or decision.lines or decision.actions:
            self.save_state()
        return decision.actions, done

    # -- one cycle (--once, and tests): every replica once, then one decision

    def cycle(self) -> CycleReport | None:
        """Read the router and the holds, probe every replica not held, decide, act, log, export, save. A
        cycle is one interval: the removal cap applies to it whole. None if stopped midway."""
        started = time.monotonic()
        self.poll()
        checks = self.probe_all([url for url in self.config.replicas if url not in self.held])
        if checks is None:
            self.log(
                f"stop requested during the probes; {self.abandoned} replica checks abandoned, no actions"
            )
            return None
        actions, done = self.decide(checks, None, budget=self.cap)
        seconds = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.cycle_done(seconds, self.clock())
        return CycleReport(self.router_up, self.states, checks, actions, done, seconds)

    # -- the daemon: each replica on its own schedule

    def run_forever(self) -> None:
        """Until ``stop``: each replica is checked every ``interval`` seconds on its own grid, at most
        ``workers`` at once, and judged the moment its verdict arrives; a replica whose check is still
        running is not dispatched again, so a slow or hanging replica delays no other. The router's worker
        list and the holds are read every ``router_poll`` seconds (the router-health fast path). A failing
        step is logged, not fatal."""
        config = self.config
        wake = threading.Event()
        pool = ThreadPoolExecutor(
            max_workers=min(config.workers, len(config.replicas)), thread_name_prefix="guard-probe"
        )
        start = self.monotonic()
        # The first checks spread evenly over the first interval, so the fleet is asked at an even pace, not
        # in bursts of every replica at once.
        spread = config.interval / len(config.replicas)
        due = {url: start + number * spread for number, url in enumerate(config.replicas)}
        running: dict[Future[ReplicaCheck], tuple[str, float]] = {}
        next_poll = start
        try:
            while not self.stop.is_set():
                now = self.monotonic()
                try:
                    if now >= next_poll:
                        self.poll()
                        self.decide({}, set())
                        next_poll = next_tick(next_poll, config.router_poll, self.monotonic())[0]
                    now = self.monotonic()
                    busy = {url for url, _started in running.values()}
                    held_due: set[str] = set()
                    for url in config.replicas:
                        if url in busy or due[url] > now:
                            continue
                        # Its next check an interval after this one starts; one that outlasts the interval is
                        # followed by the next as soon as it ends, never by a second one beside it.
                        due[url] = now + config.interval
                        if url in self.held:
                            held_due.add(url)
                            continue
                        future = pool.submit(self.check, url)
                        running[future] = (url, now)
                        future.add_done_callback(lambda _: wake.set())
                    finished = [future for future in running if future.done()]
                    checks = {}
                    for future in finished:
                        url, dispatched = running.pop(future)
                        checks[url] = future.result()
                        took = self.monotonic() - dispatched
                        if took > config.interval:
                            self.log(
                                f"note replica={url} its check took {took:.1f} s, longer than the interval "
                                f"({config.interval:g} s); the next one starts now"
                            )
                        if self.metrics is not None:
                            self.metrics.cycle_done(took, self.clock())
                    if checks or held_due:
                        self.decide(checks, set(checks) | held_due)
                        if self.metrics is not None:  # some replica's turn ended: the guard is not stuck
                            self.metrics.alive(self.clock())
                except Exception as exc:  # keep guarding: the next step may work
                    self.log(f"step failed: {type(exc).__name__}: {exc}")
                idle = [due[url] for url in config.replicas if url not in {u for u, _t in running.values()}]
                wait = min([next_poll, *idle]) - self.monotonic()
                if wake.wait(max(min(wait, config.router_poll), 0.01)):
                    wake.clear()
        finally:
            self.abandoned = sum(1 for future in running if not future.done())
            pool.shutdown(wait=False, cancel_futures=True)


def scrub_data(data: Any, secrets: Sequence[str]) -> Any:
    """A copy of JSON-like ``data`` whose strings are scrubbed (scrubbing the JSON text could break it)."""
    if isinstance(data, str):
        return guard_policy.scrub(data, secrets)
    if isinstance(data, Mapping):
        return {scrub_data(str(key), secrets): scrub_data(value, secrets) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub_data(item, secrets) for item in data]
    return data


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return f": {guard_policy.clip(text, ERROR_BODY_CHARS)}" if text else ""


# --- Entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: ``--config PATH`` and ``--once``."""
    parser = argparse.ArgumentParser(description="Judge what each sglang replica answers; act on the router.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"guard.json (default {DEFAULT_CONFIG})")
    parser.add_argument("--once", action="store_true", help="run one cycle, print the states as JSON, exit")
    return parser.parse_args(argv)


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, _frame: object) -> None:
        # Set the event from another thread: Event.set in a handler can deadlock on the event's own lock.
        threading.Thread(target=stop.set, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the guard. Returns the exit code: 0, or 2 for a bad config."""
    args = parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"sglang-guard: config error: {exc}", file=sys.stderr, flush=True)
        return 2
    secrets = Secrets.from_env(environ)
    stop = threading.Event()
    guard = Guard(config, secrets, stop=stop)
    guard.load_state()

    if args.once:
        report = guard.cycle()
        document = report.to_dict() if report is not None else {"stopped": True}
        print(json.dumps(scrub_data(document, secrets.values()), indent=2), flush=True)
        return 0

    _install_signal_handlers(stop)
    guard.metrics = Metrics()
    guard.metrics.serve(config.metrics_host, config.metrics_port)
    guard.log(
        f"start: {len(config.replicas)} replicas, interval {config.interval:g} s, "
        f"fail_after {config.fail_after}, recover_after {config.recover_after}, "
        f"removal cap {guard.cap} per interval, router poll {config.router_poll:g} s, "
        f"{config.workers} checks at once, "
        f"router {config.router_url}, metrics on {config.metrics_host}:{config.metrics_port}, "
        f"{secrets.summary()}"
    )
    guard.run_forever()
    guard.log("stop: SIGTERM or SIGINT received")
    if guard.abandoned:
        # Probe threads still wait on a replica: do not let interpreter shutdown join them (up to 'timeout').
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
