import torch


class Search(torch.nn.Module):
    def forward(self, rows, values):
        return torch.searchsorted(rows, values), torch.searchsorted(rows, values, side="right")


rows = torch.tensor([0, 0, 1, 1, 1, 3])
values = torch.tensor([0, 1, 2, 3, 4])
try:
    torch.onnx.export(Search(), (rows, values), dynamo=True, verbose=False)
    print("OK")
except Exception as error:
    print("FAILED:", type(error).__name__, [line for line in str(error).splitlines() if "No ONNX function" in line][:1])
