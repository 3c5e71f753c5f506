"""Runs DeepSeek's own EPLB (eplb.py from github.com/deepseek-ai/EPLB) on fixed load matrices and
writes inputs and outputs as deepseek_eplb.json, the oracle for tests/parallel/test_eplb.cpp.

usage: /usr/bin/python3 make_deepseek_fixture.py EPLB_GIT_DIR OUT.json
(EPLB_GIT_DIR: a clone's .git directory or a bare mirror; eplb.py is read from its HEAD.)
(needs torch; Debian's python3-torch. Not a dependency of deepinfer: only this script uses it.)
Loads are integers chosen so that no two experts ever tie (w_a * c_b != w_b * c_a for every
replica count c up to the most an expert can get, and distinct group sums): their code leaves
the order of equal weights to torch.sort, which is not stable.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import torch

git_dir, out_path = sys.argv[1], sys.argv[2]
commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True,
                        check=True).stdout.strip()
source_dir = tempfile.mkdtemp()
with open(os.path.join(source_dir, "eplb.py"), "w") as source:
    source.write(subprocess.run(["git", "--git-dir", git_dir, "show", commit + ":eplb.py"], capture_output=True,
                                text=True, check=True).stdout)
sys.path.insert(0, source_dir)
import eplb  # noqa: E402


def tie_free(row, num_groups, max_count):
    for a in range(len(row)):
        for b in range(len(row)):
            if a == b:
                continue
            for ca in range(1, max_count + 1):
                for cb in range(1, max_count + 1):
                    if row[a] * cb == row[b] * ca:
                        return False
    group_size = len(row) // num_groups
    sums = [sum(row[g * group_size:(g + 1) * group_size]) for g in range(num_groups)]
    return len(set(sums)) == len(sums)


def random_weights(rng, num_layers, num_logical, num_replicas, num_groups, skew):
    max_count = num_replicas - num_logical + 1
    layers = []
    while len(layers) < num_layers:
        # Zipf-like popularity over a random order, scaled to token counts.
        order = list(range(num_logical))
        rng.shuffle(order)
        row = [int(100000 / (1 + order[e]) ** skew * rng.uniform(0.8, 1.2)) + 1 for e in range(num_logical)]
        if tie_free(row, num_groups, max_count):
            layers.append(row)
    return layers


rng = random.Random(20261203)
cases = []
# name, layers, logical, replicas, groups, nodes, gpus, skew
specs = [
    ("global_no_redundant", 2, 16, 16, 1, 1, 4, 1.0),
    ("global_redundant", 3, 16, 24, 1, 1, 4, 1.0),
    ("global_groups_not_on_nodes", 2, 12, 16, 4, 3, 4, 0.8),
    ("global_one_slot_per_gpu", 2, 8, 8, 1, 1, 8, 1.2),
    ("global_wide", 2, 64, 80, 1, 1, 16, 1.1),
    ("hierarchical", 3, 16, 24, 4, 2, 4, 1.0),
    ("hierarchical_wide", 2, 32, 48, 8, 4, 8, 0.9),
    ("hierarchical_one_gpu_per_node", 2, 24, 32, 6, 2, 2, 1.0),
]
readme_weight = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                 [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
if all(tie_free(row, 4, 5) for row in readme_weight):
    specs.insert(0, ("readme_example", None, 12, 16, 4, 2, 8, None))

for name, num_layers, num_logical, num_replicas, num_groups, num_nodes, num_gpus, skew in specs:
    if name == "readme_example":
        weight = readme_weight
    else:
        weight = random_weights(rng, num_layers, num_logical, num_replicas, num_groups, skew)
    phy2log, log2phy, logcnt = eplb.rebalance_experts(torch.tensor(weight), num_replicas, num_groups, num_nodes,
                                                      num_gpus)
    cases.append({
        "name": name,
        "num_replicas": num_replicas,
        "num_groups": num_groups,
        "num_nodes": num_nodes,
        "num_gpus": num_gpus,
        "weight": weight,
        "phy2log": phy2log.tolist(),
        "log2phy": log2phy.tolist(),
        "logcnt": logcnt.tolist(),
    })

header = {"source": "deepseek-ai/EPLB eplb.py rebalance_experts", "eplb_commit": commit,
          "torch_version": torch.__version__}
with open(out_path, "w") as out:
    # One case per line, so a diff shows which case changed.
    out.write(json.dumps(header)[:-1] + ', "cases": [\n')
    out.write(",\n".join(json.dumps(case) for case in cases))
    out.write("\n]}\n")
print("wrote", len(cases), "cases to", out_path)
