# smg's CLI, run in-process with the keys from the environment file appended to its arguments: smg takes its
# keys only as arguments, and a process's arguments are readable by every local user (/proc/<pid>/cmdline), so
# the keys are on no command line and in no `systemctl show`. The unit passes this program to `python -c`, one
# statement per line joined with "; " (roles/sglang_router/vars/main.yml): no docstring, no compound
# statement.
import os, sys
from smg.cli import main

env = os.environ
api = ["--api-key", env["SMG_API_KEY"]] if env.get("SMG_API_KEY") else []
main(sys.argv[1:] + api + ["--control-plane-api-keys", env["SMG_CONTROL_PLANE_KEY"]])
