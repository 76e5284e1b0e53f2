"""Which part of resnet50's fp16 autocast step goes non-finite on this GPU: 10 amp_fp16 steps with
cuDNN on/off and channels_last on/off, printing the loss and GradScaler's scale."""

import torch

from ampbench.modes import MODES
from ampbench.train import Trainer
from models import get_model

spec = get_model("resnet50")
for cudnn_on in (True, False):
    for cl in (True, False):
        torch.backends.cudnn.enabled = cudnn_on
        torch.backends.cudnn.benchmark = True
        t = Trainer(spec, MODES["amp_fp16"], torch.device("cuda"))
        if not cl:
            t.model = t.model.to(memory_format=torch.contiguous_format)
            t.input_pool = [x.contiguous() for x in t.input_pool]
        losses = []
        with t.mode.math_flags():
            for i in range(12):
                losses.append(t.step())
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            out = t.model(t.inputs)
        print(f"diag cudnn={cudnn_on} channels_last={cl}: losses {[round(float(l), 2) for l in losses]} "
              f"scale {t.scaler.get_scale():.3g} logits max {float(out.float().abs().max()):.3g} finite {bool(torch.isfinite(out).all())}", flush=True)
        del t
        torch.cuda.empty_cache()
torch.backends.cudnn.enabled = True
