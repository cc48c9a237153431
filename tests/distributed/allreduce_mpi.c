/* The MPI test's program (tests/distributed/test_mpi_allreduce.py): a real MPI_Allreduce
 * across the ranks mpirun started on both agents' workers; each rank says which worker's
 * node it ran on (MPI_EXEC_ADDR of the worker that hosted its daemon). The last rank of
 * the first attempt then fails on purpose, so fault tolerance restarts the whole job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    double started = MPI_Wtime();
    int rank = 0, world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int value = rank + 1, sum = 0;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int expected = world * (world + 1) / 2;
    const char *node = getenv("MPI_EXEC_ADDR");
    printf("RESULT rank=%d world=%d sum=%d expected=%d node=%s allreduce=%.3fs\n", rank, world,
           sum, expected, node ? node : "?", MPI_Wtime() - started);
    fflush(stdout);
    MPI_Finalize();
    const char *attempt = getenv("ATTEMPT");
    if (attempt && strcmp(attempt, "1") == 0 && rank == world - 1) {
        printf("rank %d failing on purpose\n", rank);
        return 1;
    }
    return sum == expected ? 0 : 3;
}
