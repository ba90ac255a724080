#!/usr/bin/env bash
# nmt (this work tree) and OpenNMT-py 3.5.1 side by side on one CUDA GPU, in one call.
# MODEL=bench (the default): Luong general attention with input feeding, embeddings 256, BiLSTM
# 2x256, decoder LSTM 512, Adam, Multi30k de-en. MODEL=large: embeddings 512, BiLSTM 2 layers x
# 512 per direction, decoder 2 x 1,024, batch 128 in the budget phase (nmt-large.yaml and
# onmt-large.yaml beside this script). Each toolkit's own mixed precision (nmt bf16, OpenNMT-py
# fp16, which has no bf16). Run from the project root with the kit ../shared/gpu copied to .peer
# (its README says how, and how to carry it and the data to the device).
# Phases (PHASES, default all three, about 8 minutes on an H200; a device call may run 10):
#   budget      both train BUDGET_S seconds (default 120) at batch 64 with their own validation,
#               then test_2016 greedy and beam 5: steps, target tokens/s, BLEU/chrF, decode time
#   throughput  both train THROUGHPUT_S seconds (default 45) at batch BATCH (default 256), no
#               validation: steps and target tokens/s
#   decode      the budget phase's models (alike in quality; without that phase, the throughput
#               phase's, said in the summary) translate 10,000 lines (test_2016 x 10): greedy and
#               beam 5, batch 64 and 256, with the same search: raw log-probability ranking
#               (OpenNMT-py's default; nmt's recipe ranks with a length penalty and so searches
#               longer, for its exact stop) and outputs capped at 1.5 x source + 5; nmt also
#               with --rows pooled (its search before fixed rows and CUDA graphs, issue 52)
#               (greedy and beam 5, batch 64), and with a lexical shortlist (`nmt shortlist` on
#               the training pieces, beam 5 batch 64); then decode_share.py beside this script
#               splits the fixed rows' beam 5 time (batch 64 and 256) into the device's and the host's
#   bulk        (not in the default PHASES: about 4 more minutes) the same models and search,
#               100,000 lines (test_2016 x 100) at beam 5, batch 256: back-translation's size
#   precision   (not in the default) nmt alone, PRECISION_S seconds (default 30) at batch BATCH
#               in bf16, then fp16, then bf16 again: target tokens/s of each (fp16 for cards
#               without bf16); on a CPU all three are fp32
#   tests       (not in the default) the cuda tests of tests/test_cuda.py, on the same card
# KEEP=1 keeps WORK from an earlier call on the same machine (its prepared data and models), so
# that the phases can be split over two calls of under 10 minutes each (docs/performance.md).
# Every translation line gives the whole command, the start-up apart from it (a one-line input
# through the same command, run after the first use of each model: imports, CUDA start, model
# load, with the file cache warm), the decoding loop (the rest), and the pieces generated
# (counted with the one SentencePiece model of the kit) a line and a second.
# nmt validates in the budget phase as its recipe does: since 2026-11-28 train.valid_share 0.05
# (earlier runs validated every 250 steps, 19% of a 120 s budget on an H200).
# Results: $OUT/summary.txt, one line a figure. DEVICE=cpu makes a quick dry run on a machine
# without a GPU (fp32, tiny budgets and sets: BUDGET_S=20 THROUGHPUT_S=15 TEST_LINES=30).
set -u
ROOT=$(pwd); HERE=$(cd "$(dirname "$0")" && pwd); KIT=${KIT:-$ROOT/.peer}; DATA=${DATA:-$KIT/multi30k}
PY=${PY:-python3}; DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-bench}
case $MODEL in
  bench) NMT_CONFIG=multi30k-luong-dot.yaml; ONMT_MODEL=() ;;
  large) NMT_CONFIG=$HERE/nmt-large.yaml
         mapfile -t ONMT_MODEL < <($PY -c "import yaml,sys; [print(f'{k}={v}') for k, v in yaml.safe_load(open(sys.argv[1])).items()]" "$HERE/onmt-large.yaml") ;;
  *) echo "side_by_side.sh: MODEL=$MODEL is not a model here; use MODEL=bench or MODEL=large" >&2; exit 2 ;;
esac
[ "$MODEL" = bench ] || [ ${#ONMT_MODEL[@]} -gt 0 ] ||
  { echo "side_by_side.sh: could not read $HERE/onmt-large.yaml with $PY (PyYAML?)" >&2; exit 2; }
[ -d "$KIT/peer" ] || { echo "side_by_side.sh: no kit at $KIT; copy ../shared/gpu there (its README says how)" >&2; exit 2; }
PHASES=${PHASES:-budget throughput decode}
for phase in $PHASES; do case $phase in budget|throughput|decode|bulk|precision|tests) ;;
  *) echo "side_by_side.sh: PHASES names '$phase'; use budget, throughput, decode, bulk, precision or tests" >&2; exit 2 ;;
esac; done
O=${OUT:-/tmp/sbs-out}; W=$(realpath -m "${WORK:-/tmp/sbs}")
# WORK is emptied: only a folder this script made (its mark inside), or a new or empty one.
[ ! -d "$W" ] || [ -e "$W/.side_by_side" ] || [ -z "$(ls -A "$W")" ] ||
  { echo "side_by_side.sh: WORK=$W holds files this script did not make; name a new folder" >&2; exit 2; }
[ "${KEEP:-0}" = 1 ] && [ -e "$W/.side_by_side" ] || rm -rf "$W"
mkdir -p "$W" "$O"; touch "$W/.side_by_side"
TEST_LINES=${TEST_LINES:-1000}; BUDGET_S=${BUDGET_S:-120}; THROUGHPUT_S=${THROUGHPUT_S:-45}; BATCH=${BATCH:-256}
PRECISION_S=${PRECISION_S:-30}
GPUR="[0]"; ODT=fp16; NP=bf16; GFLAG="-gpu 0"
[ "$DEVICE" = cuda ] || { GPUR="[]"; ODT=fp32; NP=fp32; GFLAG=""; }
# The kit's wheels are for the device's Python 3.12; elsewhere put OpenNMT-py 3.5.1 into /tmp/sbs-site first.
PYTHONPATH=/tmp/sbs-site:$KIT/stubs $PY -c "import onmt, pyonmttok" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sbs-site "$KIT"/wheels/*.whl || exit 3
export PYTHONPATH=/tmp/sbs-site:$ROOT:$KIT/stubs PYTHONUNBUFFERED=1 TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
now() { date +%s.%N; }
el() { $PY -c "print(round($2-$1,2))"; }
say() { echo "$*" | tee -a "$O/summary.txt"; }
say "# $(date -Is) model $MODEL, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo $DEVICE) torch $($PY -c 'import torch;print(torch.__version__)') nmt $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo +changes)"
[ -e "$W/data/prep_info.json" ] || $PY "$KIT/peer/prep.py" "$DATA" "$W/data" > "$W/prep.log" 2>&1 ||
  { say "prep failed"; tail -5 "$W/prep.log"; exit 3; }

onmt_train() {  # $1 name, $2 seconds, then key=value overrides
  local name=$1 secs=$2; shift 2
  rm -rf "${W:?}/$name"; mkdir -p "$W/$name/vocab"  # a run of an earlier call (KEEP=1) is replaced
  sed "s#@PEERS@/runs/onmt_vocab#$W/$name/vocab#g; s#@PEERS@#$W#g" "$KIT/peer/onmt_general.yaml" > "$W/$name.base.yaml"
  $PY "$KIT/peer/cfg_override.py" "$W/$name.base.yaml" "$W/$name.yaml" "gpu_ranks=$GPUR" model_dtype=$ODT \
      save_model=$W/$name/model save_checkpoint_steps=1000000000 "${ONMT_MODEL[@]}" "$@"
  $PY -m onmt.bin.build_vocab -config "$W/$name.yaml" -n_sample -1 -num_threads 8 > "$W/$name-vocab.log" 2>&1
  local a b rc; a=$(now)
  DEADLINE_EPOCH=$($PY -c "import time; print(time.time()+$secs+6)") STEP_LOG=$W/$name.steps.json \
    timeout $((secs+240)) $PY "$KIT/peer/onmt_steps.py" -config "$W/$name.yaml" > "$W/$name.log" 2>&1
  rc=$?; b=$(now)
  $PY - "$W/$name.steps.json" "$name" "$(el $a $b)" "$rc" >> "$O/summary.txt" <<'PY'
import json, sys
path, name, wall, rc = sys.argv[1:]
rec = json.load(open(path)); a, b = rec[min(100, len(rec) // 3)], rec[-1]
rate = f"{(b[1]-a[1])/(b[0]-a[0]):.0f} target tokens/s over steps {a[2]}..{b[2]}" if b[0] > a[0] else "too few steps for a rate"
print(f"{name}: rc {rc}, command {wall} s, {b[2]} steps, {rate}")
PY
}
nmt_train() {  # $1 name, $2 seconds, then --set overrides
  local name=$1 secs=$2; shift 2
  rm -rf "${W:?}/$name"  # a run of an earlier call (KEEP=1) is replaced
  local a b rc; a=$(now)
  timeout $((secs+240)) $PY -m nmt train -c "$NMT_CONFIG" --set data.dir="$DATA" --set model.attention.type=general \
    --set train.max_time=$secs --set train.device=$DEVICE --set train.precision=$NP "$@" -o "$W/$name" -q > "$W/$name.log" 2>&1
  rc=$?; b=$(now)
  $PY - "$W/$name/metrics.jsonl" "$name" "$(el $a $b)" "$rc" >> "$O/summary.txt" <<'PY'
import json, statistics, sys
path, name, wall, rc = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
rates = [r["tgt_tokens_per_s"] for r in rows if "tgt_tokens_per_s" in r]
rates = rates[1:] or rates  # the first row includes warm-up
rate = f"{statistics.median(rates):.0f} target tokens/s (median of {len(rates)} log rows)" if rates else "no log rows"
valid = [r["valid_seconds"] for r in rows if "valid_seconds" in r]
share = f", validating {sum(valid):.1f} s in {len(valid)} runs ({100 * sum(valid) / float(wall):.1f}% of the command)" if valid else ""
print(f"{name}: rc {rc}, command {wall} s, {max(r.get('step', 0) for r in rows)} steps, {rate}{share}")
PY
}
translate() {  # $1 label, $2 toolkit, $3 model, $4 input (raw text), $5 beam, $6 batch, then nmt's options
  local a b rc; a=$(now); run_translate "$@"; rc=$?; b=$(now)
  [ -n "${STARTED[$2 $3]:-}" ] || STARTED[$2 $3]=$(start_up "$@")
  say "$1: rc $rc, command $(el $a $b) s, $(wc -l < "$W/$1.hyp") lines, $($PY - "$W/$1.hyp" "$W/data/spm8k.model" "$(el $a $b)" "${STARTED[$2 $3]}" <<'PY'
import sys, sentencepiece as s
path, model, wall, start = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
lines = open(path, encoding="utf-8").read().splitlines()
pieces = sum(len(p) for p in s.SentencePieceProcessor(model_file=model).encode(lines)) + len(lines)  # + EOS
per_line = f"{pieces / max(len(lines), 1):.2f} pieces a line"
if start == "failed":  # no start-up figure: the whole command only
    print(f"start-up run failed, {per_line}, {pieces / wall:.0f} pieces/s in the whole command")
else:
    loop = wall - float(start)  # at or under 0: the input was too short to tell the loop from the start-up
    rate = f"{pieces / loop:.0f} pieces/s in the loop" if loop > 0 else "the loop within the start-up's noise"
    print(f"start-up {float(start):.2f} s, loop {max(loop, 0):.2f} s, {per_line}, {rate}")
PY
)"
}
start_up() {  # translate()'s arguments: the seconds of the same command on one line, or "failed"
  head -n 1 "$4" > "$W/one.de"; encode "$W/one.de"; local c; c=$(now)
  run_translate "start-$1" "$2" "$3" "$W/one.de" "${@:5}" && el $c $(now) || echo failed
}
declare -A STARTED
run_translate() {  # translate()'s arguments; writes $W/$1.hyp
  local out=$W/$1.hyp rc
  if [ "$2" = onmt ]; then
    local ex=""; [ "$5" = 1 ] && ex="-random_sampling_topk 1"
    $PY -m onmt.bin.translate -model "$3" -src "$4.sp" -output "$out.sp" -beam_size "$5" -batch_size "$6" -batch_type sents \
      -length_penalty none -max_length_ratio 1.5 -seed 42 $GFLAG $ex > "$W/$1.log" 2>&1; rc=$?
    $PY -c "import sentencepiece as s,sys; m=s.SentencePieceProcessor(model_file='$W/data/spm8k.model'); [print(m.decode(l.split())) for l in open('$out.sp', encoding='utf-8')]" > "$out"
  else
    $PY -m nmt translate -m "$3" -i "$4" -o "$out" --beam "$5" --batch-size "$6" --device $DEVICE -q "${@:7}" > "$W/$1.log" 2>&1; rc=$?
  fi
  return $rc
}
bleu() {  # labels...: BLEU and chrF on test_2016
  $PY - "$DATA/test_2016_flickr.en" "$W" "$@" >> "$O/summary.txt" <<'PY'
import sys
from sacrebleu.metrics import BLEU, CHRF
ref_path, w, *labels = sys.argv[1:]
ref = open(ref_path, encoding="utf-8").read().splitlines()
for label in labels:
    hyp = open(f"{w}/{label}.hyp", encoding="utf-8").read().splitlines()
    ref = ref[: len(hyp)]  # TEST_LINES may take the first lines only
    print(f"{label}: BLEU {BLEU().corpus_score(hyp, [ref]).score:.2f} chrF {CHRF().corpus_score(hyp, [ref]).score:.2f}")
PY
}
encode() { $PY -c "import sentencepiece as s; m=s.SentencePieceProcessor(model_file='$W/data/spm8k.model'); [print(' '.join(m.encode(l.rstrip(chr(10)), out_type=str))) for l in open('$1', encoding='utf-8')]" > "$1.sp"; }
head -n "$TEST_LINES" "$DATA/test_2016_flickr.de" > "$W/test.de"; encode "$W/test.de"

for phase in $PHASES; do case $phase in
budget)
  onmt_train onmt-budget "$BUDGET_S" report_every=100 valid_steps=1000
  nmt_train nmt-budget "$BUDGET_S"
  ck=$(ls -v "$W"/onmt-budget/model_step_*.pt 2>/dev/null | tail -1)
  [ -n "$ck" ] || { say "onmt-budget saved no checkpoint: $W/onmt-budget.log"; continue; }
  for beam in 1 5; do
    translate onmt-budget-beam$beam onmt "$ck" "$W/test.de" $beam 64
    translate nmt-budget-beam$beam nmt "$W/nmt-budget/checkpoints/last.pt" "$W/test.de" $beam 64
  done
  bleu onmt-budget-beam1 nmt-budget-beam1 onmt-budget-beam5 nmt-budget-beam5 ;;
throughput)
  onmt_train onmt-throughput "$THROUGHPUT_S" batch_size=$BATCH report_every=50 valid_steps=100000000
  nmt_train nmt-throughput "$THROUGHPUT_S" --set train.batch_size=$BATCH --set train.valid_every=100000 --set train.log_every=20 ;;
decode|bulk)  # OpenNMT-py caps at 1.5 x the batch's longest source + 5, nmt at 1.5 x each source
              # (EOS included) + 4: alike, and rarely reached when both rank by raw log-probability
  SAME_SEARCH="--alpha 0 --length-penalty none --max-len 250 --max-len-ratio 1.5 --max-len-add 4"
  from=budget; [ -d "$W/nmt-budget" ] || from=throughput
  [ -d "$W/nmt-$from" ] || { say "$phase needs the budget or the throughput phase"; continue; }
  ck=$(ls -v "$W"/onmt-$from/model_step_*.pt 2>/dev/null | tail -1)
  [ -n "$ck" ] || { say "onmt-$from saved no checkpoint: $W/onmt-$from.log"; continue; }
  say "$phase: the $from phase's models"
  if [ $phase = decode ]; then lines=10; runs=("1 64" "1 256" "5 64" "5 256"); else lines=100; runs=("5 256"); fi
  for ((i = 0; i < lines; i++)); do cat "$W/test.de"; done > "$W/$phase.de"; encode "$W/$phase.de"
  for bb in "${runs[@]}"; do set -- $bb
    translate onmt-$phase-beam$1-batch$2 onmt "$ck" "$W/$phase.de" $1 $2
    translate nmt-$phase-beam$1-batch$2 nmt "$W/nmt-$from/checkpoints/last.pt" "$W/$phase.de" $1 $2 $SAME_SEARCH
    [ $phase = bulk ] || [ $2 != 64 ] || translate nmt-$phase-beam$1-batch$2-pooled nmt \
      "$W/nmt-$from/checkpoints/last.pt" "$W/$phase.de" $1 $2 $SAME_SEARCH --rows pooled
  done
  [ $phase = bulk ] && continue
  $PY -m nmt shortlist -m "$W/nmt-$from/checkpoints/last.pt" --src "$DATA/train.de" --tgt "$DATA/train.en" \
    -o "$W/shortlist.npz" > "$W/shortlist.log" 2>&1 || { say "nmt shortlist failed: $W/shortlist.log"; continue; }
  translate nmt-$phase-beam5-batch64-shortlist nmt "$W/nmt-$from/checkpoints/last.pt" "$W/$phase.de" 5 64 \
    $SAME_SEARCH --shortlist "$W/shortlist.npz"
  for batch in 64 256; do  # where the fixed rows' time goes: the device's windows or the host
    $PY "$HERE/decode_share.py" "$W/nmt-$from/checkpoints/last.pt" "$W/$phase.de" --device $DEVICE beam=5 \
      batch_size=$batch alpha=0 length_penalty=none max_len=250 max_len_ratio=1.5 max_len_add=4 \
      >> "$O/summary.txt" 2> "$W/share-$batch.log" || say "decode_share failed: $W/share-$batch.log"
  done ;;
precision)  # bf16, fp16, bf16: the first and last bf16 runs bound the card's drift
  for run in bf16 fp16 bf16-again; do
    p=fp32; [ "$DEVICE" = cuda ] && p=${run%-again}
    NP=$p nmt_train nmt-precision-$run "$PRECISION_S" --set train.batch_size=$BATCH \
      --set train.valid_every=100000 --set train.log_every=20
  done ;;
tests)
  $PY -m pytest -q -p no:cacheprovider -m cuda "$ROOT/tests/test_cuda.py" > "$W/tests.log" 2>&1
  say "tests: rc $?, $(tail -n 1 "$W/tests.log")" ;;
esac; done
cat "$O/summary.txt"
