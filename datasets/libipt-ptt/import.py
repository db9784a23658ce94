#!/usr/bin/env python3
"""Copy libipt's compiled test suite into this folder, compactly, and write index.json.

Usage: datasets/libipt-ptt/import.py [SOURCE]   (default: /work/shared/libipt-ptt)

SOURCE is the corpus described in its README.md: one folder per libipt .ptt case with
the trace (.pt), the code (.bin), the expected tool outputs (*.exp), the .ptt source and
a case.json holding the exact ptdump/ptxed command lines libipt's test script runs.
This script keeps the .pt, .bin, .exp and .ptt files of every case, the LICENSE, and
replaces the case.json files (about 1 MB) with one index.json: per case its load
address, its CPUs and the option words of each tool. It checks that every command line
in case.json is the one the index rebuilds (see `argv` below), so tests can rebuild them.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def argv(case, tool, cpu, decoder=None):
    """The command line libipt's script/test.bash runs (relative to the case folder)."""
    cpu_words = ["--cpu", cpu] if cpu else []
    name = case["name"]
    if tool == "ptdump":
        return ["ptdump"] + cpu_words + case["ptdump"] + [name + ".pt"]
    return (["ptxed", "--" + decoder, "--raw", f"{name}.bin:{case['org']}"] + cpu_words
            + case["ptxed"] + ["--no-inst", "--check", "--pt", name + ".pt"])


def exp_name(name, tool, cpu):
    return f"{name}-{tool}" + ("" if cpu is None else "-cpu_" + cpu.replace("/", "_")) + ".exp"


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/libipt-ptt"
    cases = []
    commit = None
    for d in sorted(os.listdir(src)):
        cj = os.path.join(src, d, "case.json")
        if not os.path.isfile(cj):
            continue
        with open(cj) as f:
            j = json.load(f)
        commit = commit or j["libipt_commit"]
        assert j["libipt_commit"] == commit
        name = j["name"]
        case = {
            "name": name,
            "org": j["binary"]["load_address"],
            "cpus": j["cpus"],
            "ptdump": j["ptt_options"]["ptdump"],
            "ptxed": j["ptt_options"]["ptxed"],
            "has_ptxed": False,
        }
        keep = {j["source"], j["trace"], j["binary"]["file"]}
        runs = j["runs"]
        assert [r["cpu"] for r in runs] == (j["cpus"] or [None]), name
        for r in runs:
            for ch in r["checks"]:
                tool = ch["tool"]
                assert ch["expected"] == exp_name(name, tool, r["cpu"]), (name, ch)
                keep.add(ch["expected"])
                if tool == "ptdump":
                    assert ch["command"] == argv(case, tool, r["cpu"]), (name, ch)
                else:
                    case["has_ptxed"] = True
                    for dec, cmd in ch["commands"].items():
                        assert cmd == argv(case, tool, r["cpu"], dec), (name, ch)
        out = os.path.join(HERE, name)
        os.makedirs(out, exist_ok=True)
        for f in sorted(keep):
            shutil.copyfile(os.path.join(src, d, f), os.path.join(out, f))
        cases.append(case)
    shutil.copyfile(os.path.join(src, "LICENSE"), os.path.join(HERE, "LICENSE"))
    with open(os.path.join(HERE, "index.json"), "w") as f:
        f.write('{"libipt_commit": "%s",\n "cases": [\n' % commit)
        f.write(",\n".join("  " + json.dumps(c, separators=(", ", ": ")) for c in cases))
        f.write("\n]}\n")
    n_dump = sum(max(1, len(c["cpus"])) for c in cases)
    print(f"{len(cases)} cases, {n_dump} ptdump expected outputs", file=sys.stderr)


if __name__ == "__main__":
    main()
