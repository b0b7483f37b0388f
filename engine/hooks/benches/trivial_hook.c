// The trivial hook of the `hooks` benchmark: answers `{}` to every message, so the benchmark
// measures the ABI round trip (allocate, copy in, call, copy out, parse) and nothing else.
// Built by templates/examples/build.sh into target/hooks/trivial_hook.wasm.
#define EXPORT(name) __attribute__((export_name(name)))

static unsigned char heap[64 * 1024];
static unsigned int ret_area[2];
static const char answer[] = "{}";

EXPORT("hooks_abi_version") int hooks_abi_version(void) { return 1; }

EXPORT("cabi_realloc")
void *cabi_realloc(void *old, unsigned int old_size, unsigned int align, unsigned int size) {
    (void)old; (void)old_size; (void)align;
    if (size > sizeof(heap)) __builtin_trap();
    return heap;  // one block at a time: the host allocates only the input
}

EXPORT("message") unsigned int *message(const char *input, unsigned int len) {
    (void)input; (void)len;
    ret_area[0] = (unsigned int)(unsigned long)answer;
    ret_area[1] = sizeof(answer) - 1;
    return ret_area;
}
