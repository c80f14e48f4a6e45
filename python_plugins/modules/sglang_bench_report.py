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
  meta:
    description: What was measured (target, date, client, sglang_version, profile, dataset, input_len,
      output_len, prompts, command, note); printed at the top of the report.
    type: dict
    default: {}
author: glm5-deploy
"""

EXAMPLES = r"""
- name: Write the report
  sglang_bench_report:
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
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bench_report import BenchReportError, parse_records, plot_report, report_markdown


def _digest(paths: list[str]) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths):
        if os.path.exists(path):
            with open(path, "rb") as handle:
                sha.update(handle.read())
    return sha.hexdigest()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "results": {"type": "list", "elements": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "meta": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    texts = []
    for path in module.params["results"]:
        with open(path, encoding="utf-8") as handle:
            texts.append(handle.read())
    try:
        records = parse_records(texts)
    except BenchReportError as exc:
        module.fail_json(msg=f"benchmark results: {exc}")
    report = os.path.join(dest, "report.md")
    names = ["throughput.png", "latency.png"]
    text = report_markdown(records, module.params["meta"], names)
    if module.check_mode:
        module.exit_json(changed=not os.path.exists(report), report=report, plots=[], rows=records)
    os.makedirs(dest, exist_ok=True)
    before = _digest([report])
    with open(report, "w", encoding="utf-8") as handle:
        handle.write(text)
    plots = plot_report(records, dest, str(module.params["meta"].get("target", "sglang")))
    module.exit_json(
        changed=_digest([report]) != before,
        report=report,
        plots=[os.path.join(dest, name) for name in plots],
        rows=records,
    )


if __name__ == "__main__":
    main()
