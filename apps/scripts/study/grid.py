"""apps/scripts/study/grid.py: the study's grid - strategy names, their train_imagenet flags, runs.

A strategy name says how gradients travel; its flags are what train_imagenet needs for it:
  ddp               bucketed all-reduce overlapped with backward (the default)
  ddp_no_overlap    all-reduce after backward (--no-overlap)
  ddp_no_bucketing  one all-reduce per parameter (--no-bucketing)
  ddp_bf16          bf16 gradients on the wire (--compress bf16)
  ddp_b<MB>         bucket size <MB> MiB, first bucket min(1, MB) (e.g. ddp_b0.25, ddp_b4)
  zero1, zero2      ZeRO stage 1/2 (--zero 1/2)
  zero3             ZeRO stage 3 (--zero 3): parameters sharded too, each unit gathered around its use
  tp2, tp4          tensor parallelism over groups of 2 or 4 ranks (train_encoder --tp T, data parallel
                    over N / T): encoder workloads only - train_imagenet refuses --tp (no TP layers in
                    its CNNs), and a rank count T does not divide has no grid; both cells are skipped
  ps                parameter server (--strategy ps --ps-servers 1: one server, on rank 0; the
                    what-if model gets the same layout: K servers on ranks 0..K-1 holding whole tensors).
                    On an encoder also the recipe the servers run (recipe(): SGD, no clipping), which
                    train_encoder's BERT defaults (AdamW, clipping at 1.0) are not
A strategy that this build of train_imagenet rejects is reported as unavailable, not as a failure,
so the grid can name strategies before they exist. The what-if model's name for each is whatif_args.
Workloads: an image model (train_imagenet, synthetic images) or a BERT name (bert_tiny .. bert_large:
train_encoder on synthetic tokens, --seq-len ENCODER_SEQ_LEN and --vocab-size ENCODER_VOCAB, one
sequence per "image" in the tables).
"""
import os
import subprocess
import time

ENCODER_SEQ_LEN = 64
ENCODER_VOCAB = 8192


def is_encoder(model):
    return model.startswith("bert_")


def tp_size(strategy):
    """T of a tp<T> strategy; 1 for every other."""
    return int(strategy[2:]) if strategy.startswith("tp") and strategy[2:].isdigit() else 1


def skip_reason(model, strategy, ranks):
    """Why a cell cannot run (None: it can): TP on an image model, or a rank count T does not divide."""
    t = tp_size(strategy)
    if t > 1 and not is_encoder(model):
        return "train_imagenet refuses --tp: its CNNs have no tensor-parallel layers (encoder workloads only)"
    if t > 1 and ranks % t:
        return f"{ranks} ranks make no grid of TP {t} x DP N/{t}"
    return None


def flags(strategy):
    if strategy == "ddp":
        return []
    if strategy == "ddp_no_overlap":
        return ["--no-overlap"]
    if strategy == "ddp_no_bucketing":
        return ["--no-bucketing"]
    if strategy == "ddp_bf16":
        return ["--compress", "bf16"]
    if strategy.startswith("ddp_b"):
        mb = float(strategy[5:])
        return ["--bucket-mb", str(mb), "--first-bucket-mb", str(min(1.0, mb))]
    if strategy in ("zero1", "zero2", "zero3"):
        return ["--zero", strategy[-1]]
    if tp_size(strategy) > 1:
        return ["--tp", str(tp_size(strategy))]
    if strategy == "ps":
        return ["--strategy", "ps", "--ps-servers", "1"]
    raise SystemExit(f"study: unknown strategy '{strategy}' (ddp, ddp_no_overlap, ddp_no_bucketing, ddp_bf16, "
                     "ddp_b<MB>, zero1, zero2, zero3, tp2, tp4, ps)")


def recipe(model, strategy):
    """The optimizer flags `strategy` needs on `model` beyond flags(strategy): train_encoder under ps
    runs what its servers can (SGD with train_imagenet's momentum 0.9, no clipping:
    apps/trainer/step/step_options.cpp refuses BERT's AdamW and clipping there).
    A cell's 1-rank compute run takes the same recipe, so that the two differ in the strategy alone."""
    if is_encoder(model) and strategy == "ps":
        return ["--optimizer", "sgd", "--momentum", "0.9", "--clip-grad-norm", "0"]
    return []


def whatif_args(strategy):
    """The same strategy in apps/whatif's terms."""
    if strategy == "ps":  # train_imagenet's one server on rank 0: it receives (N-1) pushes at once
        return ["--strategy", "ps", "--ps-servers", "1"]
    if strategy in ("ddp", "ddp_no_overlap", "zero1", "zero2", "zero3"):
        return ["--strategy", strategy]
    if tp_size(strategy) > 1:
        return ["--strategy", "tp", "--tp", str(tp_size(strategy))]
    if strategy == "ddp_no_bucketing":
        return ["--strategy", "ddp", "--bucket-mb", "0", "--first-bucket-mb", "0"]
    if strategy == "ddp_bf16":
        return ["--strategy", "ddp", "--wire", "bf16"]
    if strategy.startswith("ddp_b"):
        mb = float(strategy[5:])
        return ["--strategy", "ddp", "--bucket-mb", str(mb), "--first-bucket-mb", str(min(1.0, mb))]
    raise ValueError(strategy)


class Runner:
    """Runs train_imagenet (train_encoder for a BERT) under mpiexec; one call = one cell repeat."""

    def __init__(self, build, out, steps, image_size, hostfile=None, device="cpu"):
        self.exe = os.path.join(build, "apps", "train_imagenet")
        self.encoder = os.path.join(build, "apps", "train_encoder")
        self.out, self.steps, self.size, self.hostfile, self.device = out, steps, image_size, hostfile, device
        self.unavailable = {}

    def command(self, model, strategy, ranks, batch, tag, trace=False, recipe_of=None):
        """The mpiexec command of one run; recipe_of: the strategy whose recipe() to run (default: `strategy`)."""
        warm = max(2, self.steps // 4)
        # Progress lines every `warm` steps so the last interval is all steady state.
        cmd = ["mpiexec", "-n", str(ranks)]
        if self.hostfile:
            cmd += ["-f", self.hostfile]
        # One BLAS thread per rank: ranks share the cores, so the study compares strategies, not threads.
        cmd += ["-env", "OPENBLAS_NUM_THREADS", "1", "-env", "OMP_NUM_THREADS", "1"]
        if os.path.exists("/usr/bin/time"):  # each rank's peak resident memory and page faults, into <tag>.rss.<rank>
            rss = os.path.join(self.out, "runs", tag + ".rss")
            cmd += ["sh", "-c", 'exec /usr/bin/time -f "rss_kib %M minor_faults %R" -o "$0.$PMI_RANK" "$@"', rss]
        metrics = os.path.join(self.out, "runs", tag + ".json")
        if is_encoder(model):
            # Synthetic tokens for twice the steps' sequences; one held-out batch per rank (the
            # validation is paused time, outside the rates).
            tokens = 2 * batch * ranks * self.steps * ENCODER_SEQ_LEN
            cmd += [self.encoder, "--synthetic", "--synthetic-tokens", str(max(tokens, 20000)),
                    "--vocab-size", str(ENCODER_VOCAB), "--seq-len", str(ENCODER_SEQ_LEN), "--model", model,
                    "--batch", str(batch), "--steps", str(self.steps), "--log-every", str(warm),
                    "--bench-warmup", str(warm), "--val-batches", "1", "--device", self.device, "--metrics", metrics]
        else:
            cmd += [self.exe,
                    "--synthetic", "--synthetic-size", str(batch * ranks * self.steps), "--synthetic-val-size", "0",
                    "--num-classes", "10", "--model", model, "--image-size", str(self.size), "--batch", str(batch),
                    "--steps", str(self.steps), "--log-every", str(warm), "--bench-warmup", str(warm),
                    "--no-lr-scaling", "--device", self.device, "--metrics", metrics]
        if trace:
            cmd += ["--trace", os.path.join(self.out, "runs", tag + ".trace.json")]
        return cmd + flags(strategy) + recipe(model, recipe_of or strategy)

    def run(self, model, strategy, ranks, batch, tag, trace=False, recipe_of=None):
        """Returns a dict of the run's measures, or None (strategy unavailable: reason kept)."""
        if strategy in self.unavailable:
            return None
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        log = os.path.join(self.out, "runs", tag + ".log")
        env = dict(os.environ, HYDRA_LAUNCHER=os.environ.get("HYDRA_LAUNCHER", "fork"))
        t0 = time.monotonic()
        with open(log, "w") as f:
            rc = subprocess.call(self.command(model, strategy, ranks, batch, tag, trace, recipe_of), stdout=f,
                                 stderr=subprocess.STDOUT, env=env)
        launch_s = time.monotonic() - t0
        rss, faults = [], []  # MiB and minor page faults per rank, from /usr/bin/time
        for r in range(ranks):
            t = read_time(os.path.join(self.out, "runs", f"{tag}.rss.{r}"))
            if t:
                rss.append(t.get("rss_kib", 0) / 1024.0)
                faults.append(t.get("minor_faults"))
        text = open(log).read()
        if rc != 0:
            if strategy != "ddp" and ("not implemented" in text or "unknown" in text.lower()
                                      or "not a valid" in text or "not expected" in text):
                why = [ln for ln in text.splitlines() if "not implemented" in ln or "not expected" in ln]
                self.unavailable[strategy] = (why[0] if why else "rejected by train_imagenet")[:200]
                return None
            raise SystemExit(f"study: run {tag} failed (exit {rc}); see {log}:\n" + "\n".join(text.splitlines()[-8:]))
        return {"launch_s": launch_s, "rss_mib_per_rank": rss, "minor_faults_per_rank": faults,
                "metrics": os.path.join("runs", tag + ".json")}


def read_time(path):
    """One rank's /usr/bin/time line (Runner.command's format: "rss_kib K minor_faults F", after a
    "Command exited with non-zero status" line when it failed) as a dict; removes the file. None: absent."""
    if not os.path.exists(path):
        return None
    words = open(path).read().split()
    os.remove(path)
    return {k: int(v) for k, v in zip(words, words[1:]) if k in ("rss_kib", "minor_faults") and v.isdigit()}
