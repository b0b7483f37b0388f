//! Contract-net award rule, "lowest price wins at the deadline" (hook ABI v1,
//! docs/hook-abi.md), in Zig without the standard library.
//!
//! - on_message: a `propose` whose `content.price` beats `vars.lowest_price` (or is the
//!   first) becomes the best bid: `set_vars {lowest_price, lowest_bidder}`.
//! - on_timeout at the conversation deadline: the best bidder gets an `accept-proposal` from
//!   the engine party and `vars.awarded_to` records it.
//!
//! It scans the compact JSON the engine writes instead of parsing it: values are found by
//! key inside the section they belong to (`"vars":` up to `"parameters":`, `"message":`).

var heap: [256 * 1024]u8 = undefined;
var heap_used: usize = 0;
var out: [1024]u8 = undefined;
var ret_area: [2]u32 = .{ 0, 0 };

export fn hooks_abi_version() i32 {
    return 1;
}

export fn cabi_realloc(old: ?[*]u8, old_size: usize, alignment: usize, new_size: usize) ?[*]u8 {
    const a = if (alignment == 0) 1 else alignment;
    const start = (heap_used + a - 1) & ~(a - 1);
    if (start + new_size > heap.len) @trap();
    if (old) |previous| {
        var i: usize = 0;
        while (i < old_size and i < new_size) : (i += 1) heap[start + i] = previous[i];
    }
    heap_used = start + new_size;
    return @ptrCast(&heap[start]);
}

fn find(text: []const u8, key: []const u8) ?usize {
    if (key.len > text.len) return null;
    var i: usize = 0;
    while (i + key.len <= text.len) : (i += 1) {
        var j: usize = 0;
        while (j < key.len and text[i + j] == key[j]) j += 1;
        if (j == key.len) return i + key.len;
    }
    return null;
}

fn numberAt(text: []const u8, at: usize) ?u64 {
    var i = at;
    if (i >= text.len or text[i] < '0' or text[i] > '9') return null;
    var value: u64 = 0;
    while (i < text.len and text[i] >= '0' and text[i] <= '9') : (i += 1) {
        value = value * 10 + (text[i] - '0');
    }
    return value;
}

fn stringAt(text: []const u8, at: usize) ?[]const u8 {
    if (at >= text.len or text[at] != '"') return null;
    var end = at + 1;
    while (end < text.len and text[end] != '"') end += 1;
    if (end >= text.len) return null;
    return text[at + 1 .. end];
}

const Writer = struct {
    len: usize = 0,
    fn put(self: *Writer, text: []const u8) void {
        for (text) |byte| {
            if (self.len >= out.len) @trap();
            out[self.len] = byte;
            self.len += 1;
        }
    }
    fn number(self: *Writer, value: u64) void {
        var digits: [20]u8 = undefined;
        var n: usize = 0;
        var rest = value;
        while (true) {
            digits[n] = @intCast('0' + rest % 10);
            n += 1;
            rest /= 10;
            if (rest == 0) break;
        }
        while (n > 0) {
            n -= 1;
            self.put(digits[n .. n + 1]);
        }
    }
    fn done(self: *Writer) [*]u32 {
        ret_area[0] = @intCast(@intFromPtr(&out));
        ret_area[1] = @intCast(self.len);
        return &ret_area;
    }
};

/// The `vars` object's text (up to the next conversation field).
fn varsOf(input: []const u8) []const u8 {
    const start = find(input, "\"vars\":") orelse return input[0..0];
    const rest = input[start..];
    const end = find(rest, "\"parameters\":") orelse rest.len;
    return rest[0..end];
}

fn empty() [*]u32 {
    var w = Writer{};
    w.put("{}");
    return w.done();
}

export fn message(ptr: [*]const u8, len: usize) [*]u32 {
    const input = ptr[0..len];
    const msg_at = find(input, "\"message\":") orelse return empty();
    const msg = input[msg_at..];
    const perf_at = find(msg, "\"performative\":") orelse return empty();
    const performative = stringAt(msg, perf_at) orelse return empty();
    if (!eql(performative, "propose")) return empty();
    const sender_at = find(msg, "\"sender\":") orelse return empty();
    const sender = stringAt(msg, sender_at) orelse return empty();
    const price_at = find(msg, "\"price\":") orelse return empty();
    const price = numberAt(msg, price_at) orelse return empty();
    const vars = varsOf(input);
    if (find(vars, "\"lowest_price\":")) |at| {
        if (numberAt(vars, at)) |lowest| {
            if (price >= lowest) return empty();
        }
    }
    var w = Writer{};
    w.put("{\"actions\":[{\"set_vars\":{\"lowest_price\":");
    w.number(price);
    w.put(",\"lowest_bidder\":\"");
    w.put(sender);
    w.put("\"}}]}");
    return w.done();
}

export fn timeout(ptr: [*]const u8, len: usize) [*]u32 {
    const input = ptr[0..len];
    const kind_at = find(input, "\"timeout\":{\"kind\":") orelse return empty();
    const kind = stringAt(input, kind_at) orelse return empty();
    if (!eql(kind, "conversation")) return empty();
    const vars = varsOf(input);
    const bidder_at = find(vars, "\"lowest_bidder\":") orelse return empty();
    const bidder = stringAt(vars, bidder_at) orelse return empty();
    const price_at = find(vars, "\"lowest_price\":") orelse return empty();
    const price = numberAt(vars, price_at) orelse return empty();
    var w = Writer{};
    w.put("{\"actions\":[{\"send\":{\"performative\":\"accept-proposal\",\"to\":[\"");
    w.put(bidder);
    w.put("\"],\"content\":{\"price\":");
    w.number(price);
    w.put("}}},{\"set_vars\":{\"awarded_to\":\"");
    w.put(bidder);
    w.put("\"}}],\"log\":[\"lowest price wins\"]}");
    return w.done();
}

fn eql(a: []const u8, b: []const u8) bool {
    if (a.len != b.len) return false;
    for (a, b) |x, y| {
        if (x != y) return false;
    }
    return true;
}

fn reset() void {
    heap_used = 0;
}

export fn cabi_post_message(retptr: [*]u32) void {
    _ = retptr;
    reset();
}

export fn cabi_post_timeout(retptr: [*]u32) void {
    _ = retptr;
    reset();
}
