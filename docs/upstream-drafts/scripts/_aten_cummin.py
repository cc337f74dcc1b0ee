import torch


class Model(torch.nn.Module):
    def forward(self, x):  # MM Grounding DINO takes cummax and cummin over special-token positions
        return torch.cummin(x, dim=1)


x = torch.randn(2, 8)
print("eager:", [tuple(t.shape) for t in Model()(x)])
torch.onnx.export(Model().eval(), (x,), dynamo=True, verbose=False)  # fails: no translation of aten.cummin
print("torch.onnx.export: OK")
