"""`xmfu kernels`: every Triton kernel of xmfu compiled ahead of time for GPU targets on any machine, no GPU needed
(Triton's own compiler for a `GPUTarget`, through ptxas or the AMD linker Triton ships), and what each compile
made: the matrix instructions, registers, spills, shared memory against the part's limit, occupancy.

targets holds the parts and their limits; catalog says what each kernel is launched with; worker compiles in a
child process (Triton's launch path, a stand-in driver); facts reads the compiler's output; findings judges it
(known and accepted cases named); sweep drives the workers; page prints the table, the JSON and docs/kernels.md.

Front door, below the cli: may import the kernels and the workloads' launch tables, the machine layer; never the
cli, fleet, suites or the run composition.
"""
