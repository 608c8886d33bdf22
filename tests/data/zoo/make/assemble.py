"""Assemble tests/data/zoo from the export runs' tarballs (run here, no torch needed).

python3 assemble.py ZOO_DIR_RUN1 [ZOO_DIR_RUN2 ...]   (later runs win for the models they hold)

Keeps NAME.structure.onnx (weights left out as external data in a missing NAME.weights.bin;
the dynamo exporter's per-node metadata `pkg.torch.onnx.stack_trace`, `fx_node`,
`class_hierarchy` and `namespace` dropped: 90% of the bytes; `name_scopes` kept), NAME.stats.json and one manifest, zoo.json.
"""
import glob
import json
import os
import sys

import onnx

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DROP = ("pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy",
        "namespace")


def _prune(graph):
    for node in graph.node:
        keep = [p for p in node.metadata_props if p.key not in DROP]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _prune(a.g)
            for g in a.graphs:
                _prune(g)


def main(runs):
    manifest = {}
    for run in runs:
        for f in sorted(glob.glob(os.path.join(run, "*.result.json"))):
            r = json.load(open(f))
            if r.get("status") != "ok":
                manifest.setdefault(r["name"], {}).setdefault("attempts", []).append(
                    {"exporter": "torch.onnx.export(default)" if r["mode"] == "default"
                     else "torch.onnx.export(dynamo=False)", "status": "failed",
                     "seconds": r.get("seconds"), "error": r.get("error", "").splitlines()[0][:300]})
                continue
            name = r["name"]
            m = onnx.load(os.path.join(run, name + ".structure.onnx"), load_external_data=False)
            _prune(m.graph)
            onnx.save(m, os.path.join(HERE, name + ".structure.onnx"))
            stats = json.load(open(os.path.join(run, name + ".stats.json")))
            with open(os.path.join(HERE, name + ".stats.json"), "w") as fh:
                json.dump(stats, fh, sort_keys=True, separators=(",", ":"))
            prev = [a for a in manifest.get(name, {}).get("attempts", []) if a["status"] == "failed"
                    and os.path.dirname(f) == run]
            manifest[name] = {
                "category": r["category"], "source": r["source"], "exporter": r["exporter"],
                "opset": r["opset"], "inputs": r["inputs"], "nodes": r["nodes"], "ops": r["ops"],
                "params": r["params"], "export_seconds": r["export_seconds"], "torch": r["torch"],
                "ort_full_weights": r.get("ort"), "attempts": prev + [
                    {"exporter": r["exporter"], "status": "ok", "seconds": r["seconds"]}],
            }
    with open(os.path.join(HERE, "zoo.json"), "w") as fh:
        json.dump(dict(sorted(manifest.items())), fh, indent=1, sort_keys=True)
    print(len(manifest), "models")


if __name__ == "__main__":
    main(sys.argv[1:])
