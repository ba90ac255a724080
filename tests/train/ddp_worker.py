"""`nmt train` under torchrun, watched (test_trainer.py runs it as torchrun's script):

    torchrun --nproc_per_node 2 tests/train/ddp_worker.py train -c CFG ... --output RUN

Beside the run directory each rank leaves RUN.rank<r>.pid (written first, so that a test can
kill one rank) and, when the command returns, RUN.rank<r>.json: the training pairs of every
optimiser step this rank took, every file it wrote, renamed or removed under RUN (a Python audit
hook sees every such call, ours and the libraries'), a digest of its final parameters, and
how many trainers (whose DDP wrappers hold the process group) were alive when the process group
was destroyed: one kept past it is collected at some later point, the interpreter's exit
perhaps, and gloo's threads with it.
"""

import hashlib
import json
import os
import sys
import weakref
from pathlib import Path

import torch

from nmt.__main__ import main
from nmt.train import trainer

args = sys.argv[1:]
run_dir = Path(args[args.index("--output" if "--output" in args else "--resume") + 1]).resolve()
rank = int(os.environ["RANK"])
report = {"steps": [], "writes": [], "parameters": None}
trainers = []  # weak references to the trainers this rank made
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def audit(event: str, details: tuple) -> None:
    if event == "open":
        path, mode, flags = details
        writes = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
        paths = [path] if writes else []
    elif event in ("os.rename", "os.replace"):
        paths = details[:2]  # a temp file renamed over its target writes both
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree"):
        paths = details[:1]
    else:
        return
    for path in paths:
        if isinstance(path, str | bytes | os.PathLike):
            resolved = Path(os.fsdecode(path)).resolve()
            if resolved == run_dir or run_dir in resolved.parents:
                report["writes"].append(str(resolved.relative_to(run_dir.parent)))


def watch_steps(train_step):
    def watched(self, groups):
        report["steps"].append(sorted(int(i) for group in groups for i in group))
        return train_step(self, groups)

    return watched


def watch_training(train):
    def watched(self):
        trainers.append(weakref.ref(self))
        result = train(self)
        flat = torch.cat([p.detach().flatten() for p in self.model.parameters()])
        report["parameters"] = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
        return result

    return watched


def watch_destroy(destroy):
    def watched(*args, **kwargs):
        report["trainers_alive"] = sum(ref() is not None for ref in trainers)
        return destroy(*args, **kwargs)

    return watched


Path(f"{run_dir}.rank{rank}.pid").write_text(str(os.getpid()))
sys.addaudithook(audit)
trainer.Trainer.train_step = watch_steps(trainer.Trainer.train_step)
trainer.Trainer.train = watch_training(trainer.Trainer.train)
torch.distributed.destroy_process_group = watch_destroy(torch.distributed.destroy_process_group)
try:
    main()
finally:
    Path(f"{run_dir}.rank{rank}.json").write_text(json.dumps(report))
