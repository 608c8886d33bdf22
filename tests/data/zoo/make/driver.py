"""Run every zoo export in parallel subprocesses with time limits; pack results into $OUT.

python3 driver.py [--deadline S] [--jobs N] [names...]
"""
import glob
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = "/tmp/zoo"
OUT = os.environ.get("OUT", "/tmp/zoo-out")

MODELS = [
    # slow / risky first
    "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn", "fcos_resnet50_fpn",
    "ssdlite320_mobilenet_v3_large", "swin_tiny_patch4_window7_224", "s3d", "gpt2", "wav2vec2",
    "hubert", "bert_base", "clip_vision", "whisper_tiny_encoder", "distilbert", "llama_tiny",
    "qwen2_tiny", "resnet50", "convnext_tiny", "vit_small_patch16_224", "deit_tiny_patch16_224",
    "efficientnet_b0", "mobilenetv3_large_100", "regnety_008", "fcn_resnet50",
    "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "r3d_18", "mc3_18", "r2plus1d_18",
    "squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v3_small",
]


def main():
    argv = sys.argv[1:]
    deadline, jobs = 300.0, 12
    if "--deadline" in argv:
        i = argv.index("--deadline")
        deadline = float(argv[i + 1])
        del argv[i:i + 2]
    if "--jobs" in argv:
        i = argv.index("--jobs")
        jobs = int(argv[i + 1])
        del argv[i:i + 2]
    names = argv or MODELS
    t0 = time.time()
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    pending = [(n, "default") for n in names]
    running = {}  # (name, mode) -> (proc, start, logfile)
    log = []
    try:
        while pending or running:
            now = time.time() - t0
            if now > deadline:
                break
            while pending and len(running) < jobs:
                n, mode = pending.pop(0)
                lf = open(os.path.join(WORK, "%s.%s.log" % (n, mode)), "w")
                p = subprocess.Popen([sys.executable, os.path.join(HERE, "export.py"), n, mode, WORK],
                                     stdout=lf, stderr=subprocess.STDOUT, env=env)
                running[(n, mode)] = (p, time.time(), lf)
            for key in list(running):
                p, st, lf = running[key]
                n, mode = key
                limit = 200 if mode == "default" else 150
                rc = p.poll()
                if rc is None and time.time() - st > limit:
                    p.kill()
                    p.wait()
                    rc = "timeout"
                if rc is None:
                    continue
                lf.close()
                del running[key]
                secs = round(time.time() - st, 1)
                log.append({"name": n, "mode": mode, "rc": rc, "seconds": secs})
                print("%6.1fs %-40s %-8s rc=%s %.1fs" % (time.time() - t0, n, mode, rc, secs), flush=True)
                if rc != 0 and mode == "default":
                    pending.insert(0, (n, "legacy"))
            time.sleep(0.5)
    finally:
        for key, (p, st, lf) in running.items():
            p.kill()
            log.append({"name": key[0], "mode": key[1], "rc": "deadline", "seconds": round(time.time() - st, 1)})
        with open(os.path.join(WORK, "driver.json"), "w") as f:
            json.dump({"log": log, "seconds": round(time.time() - t0, 1)}, f, indent=1)
        pack()


def pack():
    files = []
    for pat in ("*.structure.onnx", "*.stats.json", "*.result.json", "*.log", "driver.json"):
        files += glob.glob(os.path.join(WORK, pat))
    # small full models (<2 MB, weights inline) travel too, for checking materialize against real weights
    small = []
    for d in glob.glob(os.path.join(WORK, "full", "*")):
        fs = glob.glob(os.path.join(d, "*"))
        if fs and sum(os.path.getsize(f) for f in fs) < 2 * 1024 * 1024:
            small += fs
    with tarfile.open(os.path.join(OUT, "zoo.tar.gz"), "w:gz") as tar:
        for f in files:
            tar.add(f, arcname="zoo/" + os.path.basename(f))
        for f in small:
            tar.add(f, arcname="zoo/full/" + os.path.basename(os.path.dirname(f)) + "/" + os.path.basename(f))
    print("packed", len(files), "files +", len(small), "small full;",
          os.path.getsize(os.path.join(OUT, "zoo.tar.gz")), "bytes", flush=True)


if __name__ == "__main__":
    main()
