#!/usr/bin/env python3
"""Runs the README's console examples, in order, against a real `saldo serve`, and compares
every answer with the one the README shows (ignoring what changes from run to run: times,
generated ids and tokens, durations). The README can then no longer drift from the service.

Only ```console blocks are run (```text and ```sh blocks illustrate or are run elsewhere).
A console block is a run of `$ command` lines (a command continues on lines ending with `\\`),
each followed by the output the README shows for it; `#` lines are comments. The block that
starts the service is not run (this script starts it, on a fresh data directory, and takes the
tokens it prints); `T=<the admin token>; A=<the api token>; B=…` sets the shell's variables.
`cargo run -p saldo-cli --` and `saldo` run the built binary on the same data directory
(`SALDO_DATA_DIR`).

Usage: python3 .ci/readme.py [README.md]   (exit 1 on the first difference, showing both)
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTEN = "127.0.0.1:18080"
START_TIMEOUT_S = 120
COMMAND_TIMEOUT_S = 60

VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<token>"),
    (re.compile(r"\be2\.[0-9a-f]+\b"), "<cursor>"),
    # A statement's cursor carries the time of its last entry.
    (re.compile(r"\be[0-9a-f]{48}\b"), "<cursor>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s)\b"), "<duration>"),
]
# JSON members whose values change from run to run.
# Response headers that change from run to run (`curl -i`).
VOLATILE_HEADERS = re.compile(r"^(date|x-request-id): ", re.IGNORECASE)
VOLATILE_KEYS = {"elapsed_ms", "duration_ms", "at", "created_at", "expires_at", "settled_at",
                 "next", "cursor", "request_id", "secret", "uptime_s"}


def normalize_text(line):
    for pattern, token in VOLATILE:
        line = pattern.sub(token, line)
    return line.rstrip()


def normalize_json(value):
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE_KEYS else normalize_json(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_json(v) for v in value]
    if isinstance(value, str):
        return normalize_text(value)
    return value


def normalize(line):
    try:
        return json.dumps(normalize_json(json.loads(line)), sort_keys=True)
    except ValueError:
        return normalize_text(line)


def blocks(readme):
    """Each console block as a list of (command, expected output lines, line number)."""
    out, block, lines = [], None, open(readme, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if block is None:
            if line.strip() == "```console":
                block = []
        elif line.strip() == "```":
            out.append(block)
            block = None
        elif line.startswith("$ "):
            command, start = line[2:], i + 1
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command + "\n" + lines[i]
            block.append([command, [], start])
        elif line.startswith("#") or not block:
            pass
        elif line.strip():
            block[-1][1].append(line)
        i += 1
    return out


def start_service(binary, data_dir):
    log = open(os.path.join(os.path.dirname(data_dir), "serve.log"), "w")
    proc = subprocess.Popen([binary, "--data-dir", data_dir, "serve", "--listen", LISTEN],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    tokens, deadline = {}, time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(r"(admin|api) token \(generated.*\): ([0-9a-f]+)$", line.strip())
        if m:
            tokens[m.group(1)] = m.group(2)
        if line.startswith("saldo listening on"):
            return proc, tokens
    proc.kill()
    sys.exit("the service did not start; its log: " + log.name)


def run(command, env, binary):
    command = command.replace("cargo run -p saldo-cli --", binary)
    command = re.sub(r"(^|[;&|(]\s*)saldo ", lambda m: m.group(1) + binary + " ", command)
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    return [l for l in done.stdout.split("\n") if l.strip()]


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "README.md")
    binary = os.path.join(ROOT, "target", "debug", "saldo")
    subprocess.run(["cargo", "build", "-q", "-p", "saldo-cli"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="saldo-readme-")
    os.chmod(work, 0o711)  # the embedded PostgreSQL's user must reach its directory
    data_dir = os.path.join(work, "data")
    proc, tokens = start_service(binary, data_dir)
    env = dict(os.environ, SALDO_DATA_DIR=data_dir, T=tokens.get("admin", ""),
               A=tokens.get("api", ""), B="http://" + LISTEN)
    checked = 0
    try:
        for block in blocks(readme):
            for command, expected, line in block:
                if " serve" in command and "cargo run" in command:
                    continue  # the service this script started
                if command.startswith("T=<"):
                    continue  # the variables, set above
                got = run(command, env, binary)
                want = [normalize(l) for l in expected if not VOLATILE_HEADERS.match(l)]
                have = [normalize(l) for l in got if not VOLATILE_HEADERS.match(l)]
                if want != have:
                    print(f"README.md:{line}: `{command.splitlines()[0]}` answered otherwise")
                    print("  README:  " + "\n           ".join(expected))
                    print("  service: " + "\n           ".join(got))
                    return 1
                checked += 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"README: {checked} commands answered as shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
