import torch
import transformers
from transformers.models.cosmos3_edge.modeling_cosmos3_edge import Cosmos3EdgeVisionEmbeddings

print("torch", torch.__version__, "transformers", transformers.__version__)


class Resize(torch.nn.Module):
    """The vision embeddings' own position-embedding resize, on a learned 4x4 reference grid."""

    def __init__(self):
        super().__init__()
        self.grid = torch.nn.Parameter(torch.randn(4, 4, 8))

    def forward(self, grid_thw):
        return Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings(self.grid, grid_thw, 2)


model = Resize().eval()
grid_thw = torch.tensor([[1, 4, 4], [1, 2, 6]])  # two packed images: 4x4 and 2x6 patches
print("eager:", tuple(model(grid_thw).shape))
try:
    torch.export.export(model, (grid_thw,))
    print("torch.export: OK")
except Exception as error:  # the whole message: it names the model's own line that raised
    print("torch.export: FAILED:", type(error).__name__, error)
