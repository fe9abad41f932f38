#!/usr/bin/env python3
"""Writes unet_resize/: a tiny U-Net-like forward model whose decoder
upsamples with Resize (torch.onnx.export, opset 17), and the first training
step's references computed by PyTorch autograd (ONNX Runtime 1.19.2 cannot
make them: its ResizeGrad kernel is CUDA-only).

    testdata/.venv/bin/python tests/lit/autodiff/Inputs/make_unet_resize.py

The model has three Resize nodes: bilinear upsampling (mode linear,
pytorch_half_pixel, constant scales), nearest upsampling (asymmetric/floor,
constant scales) and bicubic resizing to the skip connection's size
(align_corners, sizes computed by a Shape->Slice->Concat subgraph). The loss
is torch's MSELoss (mean), which `gmopt-compile --train --loss=mse` appends.
test_data_set_0 holds the batch (input_0.pb `input`, input_1.pb `target`),
the loss (output_0.pb) and every parameter gradient (`<name>_grad`).
"""

import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "unet_resize")


class TinyUNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = torch.nn.Conv2d(1, 3, 3, padding=1)
        self.enc2 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.mid = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.dec = torch.nn.Conv2d(7, 3, 3, padding=1)
        # Two output channels: gmopt takes one-element initializers for the
        # exporter's constants, not parameters (a 1-channel head's bias).
        self.head = torch.nn.Conv2d(3, 2, 1)

    def forward(self, input):
        skip = torch.relu(self.enc1(input))                 # [N,3,10,10]
        down = F.max_pool2d(skip, 2)                        # [N,3,5,5]
        deep = torch.relu(self.enc2(down))                  # [N,4,5,5]
        deeper = F.max_pool2d(deep, 2)                      # [N,4,2,2]
        up1 = F.interpolate(torch.tanh(self.mid(deeper)), scale_factor=2.0,
                            mode="nearest")                 # [N,4,4,4]
        up2 = F.interpolate(up1, scale_factor=2.5, mode="bilinear",
                            align_corners=False)            # [N,4,10,10]
        up3 = F.interpolate(deep, size=skip.shape[-2:], mode="bicubic",
                            align_corners=True)             # [N,4,10,10]
        merged = torch.cat([skip, up2 + up3], dim=1)        # [N,7,10,10]
        return self.head(torch.relu(self.dec(merged)))


def save(tensor, name, path):
    # np.ascontiguousarray would make the 0-d loss 1-d.
    proto = numpy_helper.from_array(np.array(tensor, order="C"), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main():
    torch.manual_seed(18)
    model = TinyUNet()
    model.eval()
    rng = np.random.default_rng(1018)
    x = rng.uniform(-1, 1, size=(2, 1, 10, 10)).astype(np.float32)
    target = rng.uniform(-1, 1, size=(2, 2, 10, 10)).astype(np.float32)
    os.makedirs(os.path.join(OUT, "test_data_set_0"), exist_ok=True)
    torch.onnx.export(model, (torch.from_numpy(x),),
                      os.path.join(OUT, "model.onnx"), opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"},
                                    "output": {0: "batch"}},
                      do_constant_folding=False)
    resizes = [n for n in onnx.load(os.path.join(OUT, "model.onnx")).graph.node
               if n.op_type == "Resize"]
    assert len(resizes) == 3, resizes

    output = model(torch.from_numpy(x))
    loss = F.mse_loss(output, torch.from_numpy(target))
    model.zero_grad()
    loss.backward()
    data = os.path.join(OUT, "test_data_set_0")
    save(x, "input", os.path.join(data, "input_0.pb"))
    save(target, "target", os.path.join(data, "input_1.pb"))
    save(loss.detach().numpy(), "loss", os.path.join(data, "output_0.pb"))
    for k, (name, param) in enumerate(model.named_parameters(), start=1):
        save(param.grad.numpy(), name + "_grad",
             os.path.join(data, f"output_{k}.pb"))
    print(f"loss {loss.item():.6f}; {k} gradients; wrote {OUT}")


if __name__ == "__main__":
    main()
