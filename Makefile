# `make demo` and `make test` work on a fresh clone: both create .venv and install first.
PY         ?= python3
VENV       ?= .venv
# pip takes a local CPU wheel where one is configured (this project's machines); elsewhere the
# index's torch 2.13.0. Override for your hardware, e.g. `make install TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR   ?= demo
# the optional extras the tests exercise, so `make test` runs every integration for real
EXTRAS     ?= dev,serve,tensorboard,mlflow,onnx,browser,docs
BIN        := $(VENV)/bin
NMT        := $(BIN)/nmt
STAMP      := $(VENV)/.installed

.PHONY: install test demo lint format docs bench bench-serve bench-scale study study-plugins study-guided study-distill clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Two workers (pytest-xdist, a test file to a worker, so a file's fixtures are made once), each
# with half the cores: most tests are start-up and Python as much as products, and run side by
# side; TEST_WORKERS=0 runs them in this process, one by one.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site (mkdocs.yml: docs/*.md, the README as its home page, the API reference
# from the docstrings) into site/; --strict turns every warning, a broken link or anchor
# included, into an error. Open site/index.html.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The toy task end to end: data, training (about a minute on 2 CPU cores), translation of the
# test split, scores, the alignment error rate of its attention, examples, attention heatmaps
# and the explorer page. Everything goes to $(DEMO_DIR)/,
# which the demo rewrites each time.
demo: install
	rm -rf $(DEMO_DIR)
	$(NMT) data toy --output $(DEMO_DIR)/data
	$(NMT) train --config toy-luong.yaml --set data.dir=$(DEMO_DIR)/data --output $(DEMO_DIR)/run
	$(NMT) translate --model $(DEMO_DIR)/run --input $(DEMO_DIR)/data/test.human \
	    --output $(DEMO_DIR)/test.hyp --plot-attention $(DEMO_DIR)/attention --plot-first 3
	$(NMT) eval --hyp $(DEMO_DIR)/test.hyp --ref $(DEMO_DIR)/data/test.iso
	@echo; echo "word alignments from attention against the toy task's gold links:"
	$(NMT) align --model $(DEMO_DIR)/run --src $(DEMO_DIR)/data/test.human \
	    --gold $(DEMO_DIR)/data/test.align --output $(DEMO_DIR)/test.hyp.align
	$(NMT) align --model $(DEMO_DIR)/run --src $(DEMO_DIR)/data/test.human --ref $(DEMO_DIR)/data/test.iso \
	    --gold $(DEMO_DIR)/data/test.align --output $(DEMO_DIR)/test.ref.align
	$(NMT) explore --model $(DEMO_DIR)/run --src $(DEMO_DIR)/data/test.human --ref $(DEMO_DIR)/data/test.iso \
	    --output $(DEMO_DIR)/explore.html
	@echo; echo "examples (source | output | reference):"
	@paste -d'|' $(DEMO_DIR)/data/test.human $(DEMO_DIR)/test.hyp $(DEMO_DIR)/data/test.iso | head -8
	@echo; echo "attention heatmaps: $(DEMO_DIR)/attention/attention-{1,2,3}.png"
	@echo "open $(DEMO_DIR)/explore.html in a browser to explore attention, n-best lists and alignments"

# Training and decoding speed on the bench shape (Multi30k from ../shared when present, else the
# toy task); under 10 minutes on 2 CPU cores, a few more the first time (it trains a checkpoint).
bench: install
	$(BIN)/python scripts/bench.py

# How every cost grows with the work (docs/performance.md, section 10): `nmt data prepare` at
# 29k, 200k, 1M and 4.5M pairs, training start-up and memory on those caches, decoding 1k to 1M
# lines greedy and with beam 5. Needs Multi30k; about three hours on 2 cores, most of it the
# 1M-line decodes (BENCH_SCALE_ARGS="--only prepare" or "--lines 1000 10000" for less).
BENCH_SCALE_ARGS ?=
bench-scale: install
	$(BIN)/python scripts/bench_scale.py $(BENCH_SCALE_ARGS)

# `nmt serve` against `nmt translate` on the Multi30k test sentences (else the toy task): 1, 8 and
# 32 concurrent clients, one sentence a request; trains a 3-minute model the first time.
# BENCH_SERVE_ARGS="--model CKPT --input FILE" to use your own.
BENCH_SERVE_ARGS ?=
bench-serve: install
	$(BIN)/python scripts/bench_serve.py $(BENCH_SERVE_ARGS)

# "Bahdanau or Luong?" (docs/study.md reads docs/study/report.md): ten decoders of one model on
# Multi30k de-en, 15 minutes of training each on one thread, two at a time, three seeds: about 4
# hours on 2 CPU cores, then about half an hour of decoding. Finished runs (study-runs/) and
# translations (docs/study/hyps/) are reused, so it resumes where it stopped. STUDY_ARGS="--seeds 1"
# for one seed, "--budget 3m" for a quick look, "--report-only" to redraw docs/study/report.md and
# its figures from docs/study/results.json. Then three tests of why (seed 1, about 75 minutes):
# input feeding at equal steps instead of equal time (docs/study/equal-steps), Bahdanau's decoder
# and the best Luong one at other learning rates (the recipe's was tuned on Luong;
# docs/study/learning-rate), and two systems trained on joined pairs too (data.join=4), for the
# length stress test (docs/study/joined-training).
MULTI30K   ?= ../shared/data/multi30k
IWSLT14    ?= ../shared/data/iwslt14
STUDY_ARGS ?=
BAHDANAU      := model.decoder.style=bahdanau, model.decoder.input_feeding=false, \
	model.decoder.bridge=backward, model.attention.type=bahdanau
GENERAL_NO_IF := model.attention.type=general, model.decoder.input_feeding=false
NO_ATTENTION  := model.attention.type=none, model.decoder.input_feeding=false
STUDY_SYSTEMS := \
	--system 'no attention: $(NO_ATTENTION)' \
	--system 'Bahdanau (paper): $(BAHDANAU)' \
	--system 'additive = concat, Luong order: model.attention.type=concat' \
	--system 'dot: model.attention.type=dot' \
	--system 'dot, no input feeding: model.attention.type=dot, model.decoder.input_feeding=false' \
	--system 'general: model.attention.type=general' \
	--system 'general, no input feeding: $(GENERAL_NO_IF)' \
	--system 'local-m: model.attention.type=local_m' \
	--system 'local-p: model.attention.type=local_p' \
	--system 'multi-head (4): model.attention.type=multihead'
study: install
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) $(STUDY_SYSTEMS) \
	  --baseline 'Bahdanau (paper)' --seeds 1,2,3 --budget 15m --jobs 2 --threads 1 \
	  --join 2,3,4 --extra iwslt=$(IWSLT14)/valid --heatmap 17 --runs study-runs -o docs/study \
	  $(STUDY_ARGS)
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) \
	  --system 'general: model.attention.type=general' \
	  --system 'general, no input feeding: $(GENERAL_NO_IF)' \
	  --seeds 1 --budget 2300steps --jobs 2 --threads 1 --join 2,3,4 \
	  --runs study-runs/equal-steps -o docs/study/equal-steps $(STUDY_ARGS)
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) \
	  --system 'Bahdanau (paper), lr 0.002: $(BAHDANAU), train.lr=0.002' \
	  --system 'Bahdanau (paper), lr 0.005: $(BAHDANAU), train.lr=0.005' \
	  --system 'Bahdanau (paper), lr 0.008: $(BAHDANAU), train.lr=0.008' \
	  --system 'general, no input feeding, lr 0.005: $(GENERAL_NO_IF), train.lr=0.005' \
	  --seeds 1 --budget 15m --jobs 2 --threads 1 \
	  --runs study-runs/learning-rate -o docs/study/learning-rate $(STUDY_ARGS)
	$(NMT) data prepare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) --set data.join=4
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) --set data.join=4 \
	  --system 'no attention: $(NO_ATTENTION)' \
	  --system 'general, no input feeding: $(GENERAL_NO_IF)' \
	  --seeds 1 --budget 15m --jobs 2 --threads 1 --join 2,3,4 \
	  --runs study-runs/joined-training -o docs/study/joined-training $(STUDY_ARGS)

# "Your own attention" (docs/plugins.md reads docs/plugins/study/report.md): the two example
# plugins, location-aware and coverage attention, against Luong general (the study's base, input
# feeding on), the study's budget: 15 minutes of training each on one thread, two at a time,
# three seeds, the test split joined 2-4 lines and the IWSLT 2014 sets for long sentences;
# about 80 minutes on 2 CPU cores. STUDY_ARGS as for `make study`.
PLUGINS    := --plugin docs/plugins/location.py --plugin docs/plugins/coverage.py
study-plugins: install
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) $(PLUGINS) \
	  --system 'general: model.attention.type=general' \
	  --system 'location-aware: model.attention.type=location' \
	  --system 'coverage: model.attention.type=coverage' \
	  --baseline general --seeds 1,2,3 --budget 15m --jobs 2 --threads 1 --join 2,3,4 \
	  --extra iwslt=$(IWSLT14)/valid --extra iwslt-test=$(IWSLT14)/test --heatmap 17 \
	  --runs study-runs/plugins -o docs/plugins/study $(STUDY_ARGS)

# "Distillation and guided alignment" (docs/distillation.md reads docs/distillation/*/report.md).
# Guided alignment: the 20-minute recipe without eflomal's links of the training pairs and with
# them at weights 1.0, 0.3 and 0.1 (`pip install eflomal`), one seed, two at a time on one thread
# each; then the markup bench of each (tag placement against eflomal's links). About an hour on 2
# CPU cores.
GUIDED := study-runs/guided
study-guided: install
	test -s $(GUIDED)/train.align || $(BIN)/python scripts/eflomal_links.py \
	  --src $(MULTI30K)/train.de --tgt $(MULTI30K)/train.en -o $(GUIDED)/train.align
	$(NMT) compare -c multi30k-luong-dot.yaml --set data.dir=$(MULTI30K) \
	  --system 'plain: train.guided_alignment.weight=1.0' \
	  --system 'guided: train.guided_alignment.links=[$(GUIDED)/train.align], train.guided_alignment.weight=1.0' \
	  --system 'guided-0.3: train.guided_alignment.links=[$(GUIDED)/train.align], train.guided_alignment.weight=0.3' \
	  --system 'guided-0.1: train.guided_alignment.links=[$(GUIDED)/train.align], train.guided_alignment.weight=0.1' \
	  --seeds 1 --budget 20m --jobs 2 --threads 1 --extra val=$(MULTI30K)/val \
	  --runs $(GUIDED) -o docs/distillation/guided $(STUDY_ARGS)
	for run in plain guided guided-0.3 guided-0.1; do $(BIN)/python scripts/markup_bench.py -m $(GUIDED)/$$run/seed1 \
	  --src $(MULTI30K)/test_2016_flickr.de --ref $(MULTI30K)/test_2016_flickr.en \
	  --train-src $(MULTI30K)/train.de --train-tgt $(MULTI30K)/train.en \
	  --out docs/distillation/guided/markup-$$run; done

# Distillation: the recipe's 20-minute model (`make study-guided`'s plain run) teaches
# multi30k-small.yaml; the student on the references against the student on the teacher's beam-5
# translations, 20 minutes each, two at a time on one thread; scored with beam 5 and greedy.
KD := study-runs/distill
study-distill: install
	$(NMT) distill --teacher $(GUIDED)/plain/seed1 -c multi30k-small.yaml --set data.dir=$(MULTI30K) \
	  --stage data -o $(KD)
	for beam in 5 1; do $(NMT) compare -c multi30k-small.yaml --set data.dir=$(MULTI30K) \
	  --system 'references: train.seed=1' \
	  --system 'distilled: data.dir=$(KD)/data, data.valid=valid, data.test=test' \
	  --seeds 1 --budget 20m --jobs 2 --threads 1 --beam $$beam --extra val=$(MULTI30K)/val \
	  --runs $(KD)/students -o docs/distillation/students-beam$$beam $(STUDY_ARGS); done

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .ruff_cache .bench-cache study-runs
