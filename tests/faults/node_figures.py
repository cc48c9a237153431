"""The node fault tests' figures, printed after the suite (`make chaos`): faults injected
and survived, log lines lost or duplicated, and the most live copies seen of one rank."""

from dataclasses import dataclass, field


@dataclass
class NodeFigures:
    injected: int = 0
    survived: int = 0
    lines_lost: int = 0
    lines_duplicated: int = 0
    copies: dict[str, int] = field(default_factory=dict)  # rank → most live copies seen

    def fault(self) -> None:
        """A fault was injected (its test records survival once its checks passed)."""
        self.injected += 1

    def survive(self) -> None:
        self.survived += 1

    def lines(self, *, lost: int, duplicated: int = 0) -> None:
        self.lines_lost += lost
        self.lines_duplicated += duplicated

    def live_copies(self, rank: str, count: int) -> None:
        self.copies[rank] = max(count, self.copies.get(rank, 0))

    def summary(self) -> list[str]:
        most = max(self.copies.values(), default=0)
        return [
            f"node faults injected: {self.injected}, survived: {self.survived}",
            f"log lines lost: {self.lines_lost}, duplicated: {self.lines_duplicated}",
            f"live copies per rank: at most {most} (over {len(self.copies)} ranks watched)",
        ]


FIGURES = NodeFigures()
