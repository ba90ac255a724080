"""Run under torchrun by test_trainer.py: train, then report this replica's parameters."""

import hashlib
import json
import sys
from pathlib import Path

import torch

from nmt.config import load_config
from nmt.rundir import prepare_run_dir
from nmt.train import distributed
from nmt.train.trainer import Trainer

run_dir, overrides = Path(sys.argv[1]), sys.argv[2:]
distributed.init()
rank, world = distributed.rank_and_world()
cfg = load_config("toy-luong.yaml", overrides)
if rank == 0:
    prepare_run_dir(run_dir, cfg)
distributed.barrier()
trainer = Trainer(cfg, run_dir, quiet=True)
trainer.train()
flat = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
(run_dir / f"rank{rank}.json").write_text(json.dumps({"world": world, "sha256": digest}))
distributed.shutdown()
