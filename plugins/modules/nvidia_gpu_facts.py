"""Ansible module nvidia_gpu_facts: read a node's NVIDIA GPUs with nvidia-smi and set them as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU facts with nvidia-smi
description:
  - Runs C(nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,pci.bus_id
    --format=csv,noheader,nounits) and, unless O(topology=false), C(nvidia-smi topo -m).
  - Sets the fact C(nvidia_gpu) with the GPUs, their CUDA architecture (for example V(sm120)), the driver
    version and whether any two GPUs are joined by NVLink.
  - Fails when the node mixes GPU architectures or driver versions, since one SGLang launch needs one of each.
  - Read-only; it runs in check mode too.
version_added: "0.1.0"
author:
  - glm5-deploy maintainers (@glm5-deploy)
options:
  nvidia_smi_path:
    description:
      - Name or path of nvidia-smi. A bare name is looked up on E(PATH) and in the sbin directories.
    type: str
    default: nvidia-smi
  topology:
    description:
      - Also run C(nvidia-smi topo -m) and report the GPU-to-GPU link matrix and
        RV(ansible_facts.nvidia_gpu.nvlink).
      - With V(false), RV(ansible_facts.nvidia_gpu.nvlink) and RV(ansible_facts.nvidia_gpu.topology)
        are V(null).
    type: bool
    default: true
attributes:
  check_mode:
    description: Read-only; it gathers the same facts in check mode.
    support: full
  diff_mode:
    description: It changes nothing, so there is no diff.
    support: none
  facts:
    description: Sets RV(ansible_facts.nvidia_gpu).
    support: full
  platform:
    description: Hosts with an NVIDIA driver's C(nvidia-smi).
    support: full
    platforms: posix
notes:
  - The compute_cap query field needs driver R510 or newer.
  - On the project's lab hosts nvidia-smi is a test double that prints fixture data; the module reads it
    like the real one.
"""

EXAMPLES = r"""
- name: Gather GPU facts with nvidia-smi
  glm5.deploy.nvidia_gpu_facts:

- name: Use an nvidia-smi that is not on PATH, and skip the topology
  glm5.deploy.nvidia_gpu_facts:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    topology: false

- name: Refuse tensor parallelism across PCIe-only GPUs
  ansible.builtin.assert:
    that: ansible_facts.nvidia_gpu.nvlink or sglang_tp_size == 1
    fail_msg: "{{ ansible_facts.nvidia_gpu.count }}x {{ ansible_facts.nvidia_gpu.names[0] }} have no NVLink."
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: success
  type: complex
  contains:
    nvidia_gpu:
      description: The node's NVIDIA GPUs.
      returned: success
      type: complex
      contains:
        arch:
          description: CUDA architecture of the GPUs, C(sm) and the compute capability without the dot.
          type: str
          returned: success
          sample: sm120
        compute_cap:
          description: Compute capability as nvidia-smi prints it.
          type: str
          returned: success
          sample: "12.0"
        count:
          description: Number of GPUs.
          type: int
          returned: success
          sample: 8
        driver_version:
          description: NVIDIA driver version, the same on every GPU.
          type: str
          returned: success
          sample: 580.159.04
        names:
          description: The distinct GPU names, sorted.
          type: list
          elements: str
          returned: success
          sample: [NVIDIA RTX PRO 6000 Blackwell Server Edition]
        memory_mib_min:
          description: Memory of the smallest GPU, in MiB.
          type: int
          returned: success
          sample: 97887
        gpus:
          description: One entry per GPU, by index.
          type: list
          elements: dict
          returned: success
          sample:
            - index: 0
              name: NVIDIA H200
              compute_cap: "9.0"
              memory_mib: 143771
              driver_version: 580.159.04
              pci_bus_id: "00000000:00:06.0"
        nvlink:
          description:
            - Whether any two GPUs are joined by NVLink (an NV# link in C(topo -m)).
            - V(false) on PCIe-only nodes and single-GPU nodes; V(null) when O(topology=false).
          type: bool
          returned: success
          sample: false
        topology:
          description:
            - GPU-to-GPU part of C(nvidia-smi topo -m); V(null) when O(topology=false).
            - C(links[i][j]) is the link between GPU i and GPU j (V(X) on the diagonal).
          type: dict
          returned: success
          sample:
            gpus: [GPU0, GPU1]
            links: [[X, PIX], [PIX, X]]
            link_types: [PIX]
            nvlink: false
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.nvidia_smi import (
    QUERY_ARGS,
    TOPOLOGY_ARGS,
    GpuFactsError,
    check_topology_matches,
    parse_query_csv,
    parse_topology,
    summarize,
)

NOT_INSTALLED = (
    "nvidia-smi is not installed: {path!r} was not found on PATH or is not executable. Install the NVIDIA "
    "driver (with nvidia_driver_manage: true the nvidia_driver role installs it), or set nvidia_smi_path to "
    "where nvidia-smi is."
)


def run_nvidia_smi(module: AnsibleModule, binary: str, args: tuple[str, ...]) -> str:
    """Run nvidia-smi and return its stdout; fail the task, with its output, when it exits non-zero."""
    command = [binary, *args]
    rc, out, err = module.run_command(command)
    if rc != 0:
        detail = (out.strip() or err.strip() or "no output").splitlines()[0]
        module.fail_json(
            msg=f"{' '.join(command)} exited {rc}: {detail}", rc=rc, stdout=out, stderr=err, cmd=command
        )
    return out


def gather(module: AnsibleModule, binary: str, topology: bool) -> dict[str, Any]:
    """The nvidia_gpu fact; GpuFactsError when nvidia-smi's answers do not describe one usable node."""
    facts = summarize(parse_query_csv(run_nvidia_smi(module, binary, QUERY_ARGS)))
    facts["nvlink"] = None
    facts["topology"] = None
    if topology:
        links = parse_topology(run_nvidia_smi(module, binary, TOPOLOGY_ARGS))
        check_topology_matches(facts, links)
        facts["nvlink"] = links["nvlink"]
        facts["topology"] = dict(links)
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "str", "default": "nvidia-smi"},
            "topology": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    path = module.params["nvidia_smi_path"]
    binary = module.get_bin_path(path)
    if binary is None:
        module.fail_json(msg=NOT_INSTALLED.format(path=path))
    try:
        facts = gather(module, binary, module.params["topology"])
    except GpuFactsError as exc:
        module.fail_json(msg=f"{exc} (from {binary})")
    module.exit_json(changed=False, ansible_facts={"nvidia_gpu": facts})


if __name__ == "__main__":
    main()
