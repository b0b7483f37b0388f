// Amount guard: refuses a `request` whose content `amount` is above `config.max_amount`.
//
// Freestanding C (no libc, no WASI) against hook ABI v1 (docs/hook-abi.md). It does not
// parse JSON in general: it finds the first `"amount":` in the content and the first
// `"max_amount":` in the config, which is all this policy needs. Memory is a bump allocator
// reset by `cabi_post_message`, after the host has copied the output.

typedef unsigned int u32;
typedef unsigned long long u64;

#define EXPORT(name) __attribute__((export_name(name)))
#define HEAP_BYTES (256 * 1024)

static unsigned char heap[HEAP_BYTES];
static u32 heap_used;
static u32 ret_area[2];
static char out[256];

EXPORT("hooks_abi_version") int hooks_abi_version(void) { return 1; }

EXPORT("cabi_realloc")
void *cabi_realloc(void *old, u32 old_size, u32 align, u32 new_size) {
    u32 start = (heap_used + align - 1) & ~(align - 1);
    if (start + new_size > HEAP_BYTES) __builtin_trap();  // the input is too large for us
    unsigned char *block = heap + start;
    for (u32 i = 0; old && i < old_size && i < new_size; i++) block[i] = ((unsigned char *)old)[i];
    heap_used = start + new_size;
    return block;
}

// Finds `key` (with its quotes and colon) in text[0..len]; returns the offset after it or -1.
static int find(const char *text, u32 len, const char *key) {
    u32 klen = 0;
    while (key[klen]) klen++;
    for (u32 i = 0; i + klen <= len; i++) {
        u32 j = 0;
        while (j < klen && text[i + j] == key[j]) j++;
        if (j == klen) return (int)(i + klen);
    }
    return -1;
}

// Reads a non-negative integer at text[at..], skipping spaces; -1 when there is none.
static long long number_at(const char *text, u32 len, int at) {
    if (at < 0) return -1;
    u32 i = (u32)at;
    while (i < len && text[i] == ' ') i++;
    if (i >= len || text[i] < '0' || text[i] > '9') return -1;
    long long value = 0;
    while (i < len && text[i] >= '0' && text[i] <= '9') value = value * 10 + (text[i++] - '0');
    return value;
}

static u32 append(u32 at, const char *text) {
    while (*text && at < sizeof(out) - 1) out[at++] = *text++;
    return at;
}

static u32 append_number(u32 at, long long value) {
    char digits[24];
    int n = 0;
    do { digits[n++] = (char)('0' + value % 10); value /= 10; } while (value > 0);
    while (n > 0 && at < sizeof(out) - 1) out[at++] = digits[--n];
    return at;
}

static u32 *answer(u32 len) {
    ret_area[0] = (u32)(unsigned long)out;
    ret_area[1] = len;
    return ret_area;
}

EXPORT("message") u32 *message(const char *input, u32 len) {
    // The amount is searched after `"content":`, so a variable named `amount` cannot fool it.
    int content = find(input, len, "\"content\":");
    int amount_at = content < 0 ? -1 : find(input + content, len - (u32)content, "\"amount\":");
    long long amount = amount_at < 0 ? -1 : number_at(input, len, content + amount_at);
    long long limit = number_at(input, len, find(input, len, "\"max_amount\":"));
    if (amount < 0 || limit < 0 || amount <= limit) return answer((u32)(append(0, "{}")));
    u32 at = append(0, "{\"actions\":[{\"reject\":{\"reason\":\"amount ");
    at = append_number(at, amount);
    at = append(at, " is over the limit of ");
    at = append_number(at, limit);
    at = append(at, "\"}}]}");
    return answer(at);
}

EXPORT("cabi_post_message") void cabi_post_message(u32 *retptr) {
    (void)retptr;
    heap_used = 0;
}
