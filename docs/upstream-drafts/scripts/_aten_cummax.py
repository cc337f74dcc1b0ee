import torch


ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [1, 1, 0, 2, 2, 0, 7, 7]])
for op in ("cummax", "cummin"):
    class One(torch.nn.Module):
        def forward(self, ids):
            return getattr(torch, op)(ids, dim=1)

    try:
        torch.onnx.export(One(), (ids,), dynamo=True, verbose=False)
        print(op, "OK")
    except Exception as error:
        print(op, "FAILED:", type(error).__name__, [line for line in str(error).splitlines() if "No ONNX function" in line][:1])
