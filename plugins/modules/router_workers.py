"""Ansible module router_workers: put a list of workers into the router and take another out, in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_workers
short_description: Put workers into the sglang router and take others out, and wait for it, in one task
description:
  - Run on the router's host (delegated there). Reads the router's workers (C(GET /workers) with the admin
    key), registers every URL of O(present) it does not list (C(POST /workers)), deregisters every URL of
    O(absent) it lists (C(DELETE /workers/{id}); the router drains it first), then asks again every
    O(interval) seconds until every O(present) worker is healthy and ready and every O(absent) one is gone,
    or O(timeout).
  - One task, one connection to the router's host, whatever the number of workers, so that the validate
    play's routing costs the same at 16 replicas and at 1024 (docs/operations.md, sshd C(MaxSessions)).
  - With O(hold), first leaves a hold marker per O(absent) worker in O(hold_dir) (a file named after the sha1
    of its URL, holding the URL), so that the guard leaves it out while a rolling update has it out on
    purpose; a worker of O(present) has its marker removed once the router reports it healthy.
  - The logic is in module_utils/fleet_topology.py (batch_plan, batch_waiting, hold_name).
author:
  - glm5-deploy maintainers (@glm5-deploy)
attributes:
  check_mode:
    description: In check mode it reads the router and says what it would register, deregister and hold; it
      writes nothing and does not wait.
    support: full
  diff_mode:
    description: The router's worker list is runtime state; no diff is returned.
    support: none
  platform:
    description: The router's host (any POSIX host that reaches the router's admin API).
    support: full
    platforms: posix
options:
  url:
    description: The router's admin URL as clients on its host reach it (its edge, or loopback).
    type: str
    required: true
  admin_key:
    description: The router's admin key (sent as a bearer token).
    type: str
    required: true
  ca_path:
    description: CA bundle to verify the router's certificate against; unset, the system's.
    type: path
  present:
    description: Worker URLs to put into the router (a replica's rank 0).
    type: list
    elements: str
    default: []
  absent:
    description: Worker URLs to take out of the router.
    type: list
    elements: str
    default: []
  worker_api_key:
    description: The key the router sends to the workers it registers (smg keeps it per worker).
    type: str
  hold:
    description: Leave a hold marker for each O(absent) worker before it is taken out.
    type: bool
    default: false
  hold_dir:
    description: Where the hold markers are (the router role's C(sglang_router_hold_dir)).
    type: path
    default: /var/lib/sglang-router/holds
  timeout:
    description: Seconds to wait until the router reports every worker where it should be.
    type: int
    default: 600
  interval:
    description: Seconds between two reads of the router's workers while waiting.
    type: float
    default: 2
"""

EXAMPLES = r"""
- name: Take a rollout's batch out of the router and wait until it is drained
  glm5.deploy.router_workers:
    url: https://router.example:30000
    admin_key: "{{ sglang_router_admin_key }}"
    absent: [http://10.0.0.11:30000, http://10.0.0.12:30000]
    hold: true
  delegate_to: "{{ groups['sglang_router'] | first }}"
  run_once: true
"""

RETURN = r"""
added:
  description: The URLs it registered.
  returned: always
  type: list
  elements: str
removed:
  description: The URLs it deregistered.
  returned: always
  type: list
  elements: str
held:
  description: The URLs whose hold marker it wrote (O(absent)) or removed (O(present)).
  returned: always
  type: list
  elements: str
waited:
  description: Seconds it waited for the router to report every worker where it should be.
  returned: always
  type: float
"""

import json
import os
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    TopologyError,
    batch_plan,
    batch_waiting,
    hold_name,
)


class Router:
    """The router's admin API."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.url = module.params["url"].rstrip("/")
        self.headers = {
            "Authorization": f"Bearer {module.params['admin_key']}",
            "Content-Type": "application/json",
        }

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        try:
            response = open_url(
                self.url + path,
                method=method,
                headers=self.headers,
                data=json.dumps(body) if body is not None else None,
                ca_path=self.module.params["ca_path"],
                timeout=30,
            )
            status, text = response.status, response.read()
        except Exception as exc:  # HTTPError carries the status; anything else is a failure
            status = getattr(exc, "code", None)
            if status not in ok:
                self.module.fail_json(msg=f"{method} {self.url}{path} failed: {exc}")
            return None
        if status not in ok:
            self.module.fail_json(msg=f"{method} {self.url}{path} answered HTTP {status}")
        return json.loads(text) if text else None

    def workers(self) -> dict[str, Any]:
        return self.call("GET", "/workers") or {}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "admin_key": {"type": "str", "required": True, "no_log": True},
            "ca_path": {"type": "path"},
            "present": {"type": "list", "elements": "str", "default": []},
            "absent": {"type": "list", "elements": "str", "default": []},
            "worker_api_key": {"type": "str", "no_log": True},
            "hold": {"type": "bool", "default": False},
            "hold_dir": {"type": "path", "default": "/var/lib/sglang-router/holds"},
            "timeout": {"type": "int", "default": 600},
            "interval": {"type": "float", "default": 2},
        },
        supports_check_mode=True,
    )
    p = module.params
    router = Router(module)
    held: list[str] = []
    if p["hold"] and p["absent"]:
        for url in p["absent"]:
            marker = os.path.join(p["hold_dir"], hold_name(url))
            if not os.path.exists(marker):
                held.append(url)
                if not module.check_mode:
                    with open(marker, "w", encoding="utf-8") as handle:
                        handle.write(url.rstrip("/") + "\n")
    try:
        todo = batch_plan(router.workers(), p["present"], p["absent"])
    except TopologyError as exc:
        module.fail_json(msg=str(exc))
    changed = bool(held or todo["add"] or todo["remove"])
    if module.check_mode:
        module.exit_json(
            changed=changed,
            added=todo["add"],
            removed=[w["url"] for w in todo["remove"]],
            held=held,
            waited=0.0,
        )
    for worker in todo["remove"]:
        router.call("DELETE", f"/workers/{worker['id']}", ok=(200, 202, 404))
    for url in todo["add"]:
        body = {"url": url, **({"api_key": p["worker_api_key"]} if p["worker_api_key"] else {})}
        router.call("POST", "/workers", body, ok=(200, 202, 409))
    started = time.monotonic()
    while True:
        waiting = batch_waiting(router.workers(), p["present"], p["absent"])
        waited = round(time.monotonic() - started, 1)
        if not waiting:
            break
        if waited >= p["timeout"]:
            module.fail_json(
                msg=f"after {waited:.0f} s the router does not report these workers where they should be "
                f"({'healthy' if p['present'] else ''}{' and ' if p['present'] and p['absent'] else ''}"
                f"{'gone' if p['absent'] else ''}): {', '.join(waiting)}",
                waiting=waiting,
                added=todo["add"],
                removed=[w["url"] for w in todo["remove"]],
                held=held,
            )
        time.sleep(p["interval"])
    for url in p["present"]:
        marker = os.path.join(p["hold_dir"], hold_name(url))
        if os.path.exists(marker):
            os.unlink(marker)
            held.append(url)
            changed = True
    module.exit_json(
        changed=changed,
        added=todo["add"],
        removed=[w["url"] for w in todo["remove"]],
        held=held,
        waited=waited,
    )


if __name__ == "__main__":
    main()
