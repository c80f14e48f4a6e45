#!/usr/bin/python
"""Ansible module: turn sglang serving-benchmark JSONL results into a Markdown report with PNG plots."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_report
short_description: Write a report (Markdown table and PNG plots) of sglang serving-benchmark results
description:
  - Reads the JSONL files C(python -m sglang.benchmark.serving --output-file) wrote, one record per
    concurrency level, and writes C(report.md), C(throughput.png) and C(latency.png) into I(dest).
  - Runs where the results were fetched to (the control node); needs matplotlib there.
  - A second run over the same results writes the same files and reports no change.
  - The benchmark stores the server's C(/server_info) in every record, with the server's launch settings.
    Every value whose key names a secret (C(api_key), C(admin_api_key), C(*_token), ...) and every occurrence
    of I(secrets) is replaced by C(<hidden>), in the returned rows and in the result files themselves, which
    are rewritten so that nothing kept under the report directory holds a key.
options:
  results:
    description: JSONL files with the benchmark's records.
    type: list
    elements: path
    required: true
  dest:
    description: Directory for the report; created when missing.
    type: path
    required: true
  secrets:
    description: Values to hide wherever they appear in the records (the API key the benchmark sent, the
      server's keys). Never logged.
    type: list
    elements: str
    default: []
  meta:
    description: What was measured (target, date, client, sglang_version, profile, dataset, input_len,
      output_len, prompts, command, note); printed at the top of the report.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Reads and scrubs the results and returns the rows, but writes no file.
    support: partial
    details: In check mode C(changed) is true only when C(report.md) is missing.
  diff_mode:
    description: No diff of the report or the plots is returned.
    support: none
  platform:
    description: Where the results were fetched to (the control node), with matplotlib.
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Write the report
  glm5.deploy.sglang_bench_report:
    results: "{{ fetched.files | map(attribute='path') }}"
    dest: reports/20261130T060000
    meta: {target: "router http://lab-gateway:30000", sglang_version: "0.5.23"}
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: Path of report.md.
  type: str
  returned: success
plots:
  description: Paths of the PNG plots.
  type: list
  returned: success
rows:
  description: The benchmark records, one per concurrency level, sorted by concurrency.
  type: list
  returned: success
"""

import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.bench_report import (
    BenchReportError,
    parse_records,
    plot_report,
    report_markdown,
    scrub,
)


def _digest(paths: list[str]) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths):
        if os.path.exists(path):
            with open(path, "rb") as handle:
                sha.update(handle.read())
    return sha.hexdigest()


def _scrubbed(text: str, secrets: list[str]) -> str:
    """A JSONL text with every record's secrets hidden (bench_report.scrub); blank lines are dropped."""
    lines = [json.dumps(scrub(json.loads(line), secrets)) for line in text.splitlines() if line.strip()]
    return "".join(f"{line}\n" for line in lines)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "results": {"type": "list", "elements": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "meta": {"type": "dict", "default": {}},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
        },
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    secrets = module.params["secrets"]
    texts = {}
    for path in module.params["results"]:
        with open(path, encoding="utf-8") as handle:
            texts[path] = handle.read()
    try:
        records = [scrub(record, secrets) for record in parse_records(texts.values())]
        kept = {path: _scrubbed(text, secrets) for path, text in texts.items()}
    except BenchReportError as exc:
        module.fail_json(msg=f"benchmark results: {exc}")
    report = os.path.join(dest, "report.md")
    names = ["throughput.png", "latency.png"]
    text = report_markdown(records, module.params["meta"], names)
    if module.check_mode:
        module.exit_json(changed=not os.path.exists(report), report=report, plots=[], rows=records)
    os.makedirs(dest, exist_ok=True)
    before = _digest([report, *kept])
    for path, raw in kept.items():
        if raw != texts[path]:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(raw)
    with open(report, "w", encoding="utf-8") as handle:
        handle.write(text)
    plots = plot_report(records, dest, str(module.params["meta"].get("target", "sglang")))
    module.exit_json(
        changed=_digest([report, *kept]) != before,
        report=report,
        plots=[os.path.join(dest, name) for name in plots],
        rows=records,
    )


if __name__ == "__main__":
    main()
