/* The shim's in-process stack walker (included by preload.c: one translation unit, all
 * static). x86-64 Linux, glibc 2.35 or later.
 *
 * A sampled allocation walks the stack of its own thread from inside malloc, so nothing here
 * allocates, takes a lock or calls into anything that may (no dl_iterate_phdr, no dladdr):
 * the object of a pc comes from glibc's _dl_find_object (lock-free, made for unwinders), its
 * FDE from a binary search of the object's .eh_frame_hdr table, and the row at the pc from
 * running the CIE's and the FDE's call frame instructions. Only rip, rsp and rbp are
 * tracked: the CFA of x86-64 code is rsp- or rbp-based, and rbp is the only other register
 * a CFA is ever computed from.
 *
 * Rows are cached per pc in one direct-mapped table of 64-bit words in .bss (uw_cache): the
 * word is the pc's tag and the packed rule, read and written with one atomic access each, so
 * threads share it without locks and never see half an entry. A rule that does not fit the
 * packed form (a frame of 64 KiB or more, a register saved at an odd slot) is computed each
 * time instead. Rules never change for a pc while its object stays mapped (a dlclose'd
 * object whose addresses are reused by another one could leave stale entries: ignored).
 *
 * Every stack read is a plain load, bounded: a frame's CFA must lie above its callee's sp and
 * less than 16 MiB above it, and the only words read are the return address and saved rbp
 * slots of that frame, between the callee's sp and the CFA. */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/mman.h>

/* glibc's _dl_find_object (2.35+), found at run time: a direct reference, even a weak one,
 * makes the shim need GLIBC_2.35 to load at all, and an older glibc would then run the
 * command without the shim. dlsym is bound to its oldest version (libdl's, which glibc
 * 2.34+ keeps in libc) for the same reason. Set by uw_init (the shim's constructor: dlsym
 * may allocate); until then, and without it, uw_available() says no. */
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
typedef int (*uw_find_fn)(void *, struct dl_find_object *);
static uw_find_fn uw_find;

static void uw_init(void)
{
	if (!__atomic_load_n(&uw_find, __ATOMIC_ACQUIRE))
		__atomic_store_n(&uw_find, (uw_find_fn)dlsym(RTLD_DEFAULT, "_dl_find_object"),
				 __ATOMIC_RELEASE);
}

/* *flags bits (trace.proto's StackFlag values) */
#define UW_TRUNCATED 1u	  /* `max` reached and there were more frames */
#define UW_NO_ROWS 64u	  /* a pc in a known object but no FDE / row covers it, or a rule the
			     walker does not handle (expressions, signal frames) */
#define UW_NO_TABLE 128u  /* a pc in no loaded object, or in one without .eh_frame_hdr */
#define UW_BAD_FRAME 512u /* a CFA not above the callee's sp, or implausibly far */

#define UW_MAX_FRAME (16u << 20) /* the largest CFA - sp believed */

/* --- the rule of a pc --- */

enum { UWK_NONE = 0, UWK_FRAME = 1, UWK_OUTER = 2, UWK_NO_ROWS = 3 };
enum { UWB_SAME = 0, UWB_AT = 1, UWB_UNDEF = 2 }; /* rbp: unchanged, saved at CFA + off, lost */

struct uw_rule {
	uint32_t kind;	  /* UWK_* */
	uint32_t cfa_bp;  /* CFA = (cfa_bp ? rbp : rsp) + cfa_off */
	uint32_t bp_kind; /* UWB_* */
	int64_t cfa_off;
	int64_t bp_off;	  /* UWB_AT: the caller's rbp is at CFA + bp_off */
	int64_t ra_off;	  /* the return address is at CFA + ra_off */
};

/* The cache: 2^16 words. index = the pc's low 16 bits xor bits of the rest (cheap: the walk
 * is a chain of dependent loads, this is on it), so that the tag (pc >> 16: 31 bits, user pcs
 * being below 2^47) and the index give back the pc. Word:
 * bits 0-1 kind (0: empty), bit 2 rbp-based CFA, bits 3-18 CFA offset, bits 19-20 rbp rule,
 * bits 21-28 n where rbp is saved at CFA - 8n, bits 29-32 n where the return address is at
 * CFA - 8n, bits 33-63 the tag. */
#define UW_CACHE_BITS 16
static uint64_t uw_cache[1u << UW_CACHE_BITS];

static inline uint32_t uw_index(uint64_t pc)
{
	return (uint32_t)((pc ^ (pc >> 16) ^ (pc >> 29)) & ((1u << UW_CACHE_BITS) - 1));
}

/* 0 when the rule does not fit */
static uint64_t uw_pack(uint64_t pc, const struct uw_rule *r)
{
	uint64_t w = (pc >> 16) << 33 | r->kind;
	if (r->kind != UWK_FRAME)
		return w;
	if (r->cfa_off < 0 || r->cfa_off > 0xffff)
		return 0;
	uint64_t bn = 0;
	if (r->bp_kind == UWB_AT) {
		if (r->bp_off > -8 || r->bp_off < -8 * 255 || (r->bp_off & 7))
			return 0;
		bn = (uint64_t)(-r->bp_off / 8);
	}
	if (r->ra_off > -8 || r->ra_off < -8 * 15 || (r->ra_off & 7))
		return 0;
	return w | (uint64_t)r->cfa_bp << 2 | (uint64_t)r->cfa_off << 3 |
	       (uint64_t)r->bp_kind << 19 | bn << 21 | (uint64_t)(-r->ra_off / 8) << 29;
}

/* --- reading .eh_frame --- */

static inline uint64_t uw_uleb(const uint8_t **pp, const uint8_t *end)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	unsigned shift = 0;
	while (p < end) {
		uint8_t b = *p++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			break;
	}
	*pp = p;
	return v;
}

static inline int64_t uw_sleb(const uint8_t **pp, const uint8_t *end)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b = 0;
	while (p < end) {
		b = *p++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			break;
	}
	if (shift < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << shift;
	*pp = p;
	return (int64_t)v;
}

#define UW_LOAD(T, p)                                                                      \
	({                                                                                 \
		T v_;                                                                      \
		__builtin_memcpy(&v_, (p), sizeof(T));                                     \
		v_;                                                                        \
	})

/* Reads a pointer of encoding `enc` (DW_EH_PE_*) at *pp. `datarel`: the base of datarel
 * (0: not allowed). `raw`: the value only (an FDE's range), no relative base applied.
 * Indirect pointers are not followed (`*ind` is set instead, when given). -1 when the
 * encoding is not handled. */
static int uw_ptr(const uint8_t **pp, const uint8_t *end, uint8_t enc, uint64_t datarel,
		  int raw, uint64_t *out)
{
	const uint8_t *p = *pp;
	uint64_t v;
	if (enc == 0xff) /* DW_EH_PE_omit */
		return -1;
	switch (enc & 0x0f) {
	case 0x00: v = UW_LOAD(uint64_t, p); p += 8; break;		   /* absptr */
	case 0x01: v = uw_uleb(&p, end); break;				   /* uleb128 */
	case 0x02: v = UW_LOAD(uint16_t, p); p += 2; break;		   /* udata2 */
	case 0x03: v = UW_LOAD(uint32_t, p); p += 4; break;		   /* udata4 */
	case 0x04: v = UW_LOAD(uint64_t, p); p += 8; break;		   /* udata8 */
	case 0x09: v = (uint64_t)uw_sleb(&p, end); break;		   /* sleb128 */
	case 0x0a: v = (uint64_t)(int64_t)UW_LOAD(int16_t, p); p += 2; break; /* sdata2 */
	case 0x0b: v = (uint64_t)(int64_t)UW_LOAD(int32_t, p); p += 4; break; /* sdata4 */
	case 0x0c: v = UW_LOAD(uint64_t, p); p += 8; break;		   /* sdata8 */
	default: return -1;
	}
	if (!raw) {
		switch (enc & 0x70) {
		case 0x00: break;
		case 0x10: v += (uint64_t)(uintptr_t)*pp; break; /* pcrel */
		case 0x30: /* datarel */
			if (!datarel)
				return -1;
			v += datarel;
			break;
		default: return -1;
		}
	}
	*pp = p;
	*out = v;
	return 0;
}

/* --- running the call frame instructions --- */

enum { UWR_UNSET = 0, UWR_AT, UWR_UNDEF, UWR_BAD };
#define UW_CFA_RSP 7
#define UW_CFA_RBP 6
#define UW_CFA_OTHER (-1) /* another register, or an expression */

struct uw_state {
	int32_t cfa_reg;
	uint8_t bp, ra; /* UWR_* */
	int64_t cfa_off, bp_off, ra_off;
};

#define UW_STACK 8

struct uw_ctx {
	uint64_t pc;	 /* the pc whose row is wanted */
	uint64_t caf;	 /* code alignment factor */
	int64_t daf;	 /* data alignment factor */
	uint64_t ra_col; /* the return address column (16) */
	uint8_t fde_enc; /* for DW_CFA_set_loc */
	struct uw_state init; /* after the CIE's instructions, for DW_CFA_restore */
	struct uw_state stack[UW_STACK];
	int depth;
};

static inline void uw_set(struct uw_ctx *c, struct uw_state *s, uint64_t reg, uint8_t kind,
			  int64_t off)
{
	if (reg == 6) {
		s->bp = kind;
		s->bp_off = off;
	} else if (reg == c->ra_col) {
		s->ra = kind;
		s->ra_off = off;
	}
}

/* Runs [p, end) from location `loc` until the row covering c->pc; 0, or -1 on an
 * instruction not handled. */
static int uw_run(struct uw_ctx *c, struct uw_state *s, const uint8_t *p, const uint8_t *end,
		  uint64_t loc)
{
	while (p < end) {
		uint8_t op = *p++;
		uint64_t reg, delta;
		int64_t off;
		switch (op >> 6) {
		case 1: /* DW_CFA_advance_loc */
			delta = (uint64_t)(op & 0x3f);
			goto advance;
		case 2: /* DW_CFA_offset */
			off = (int64_t)uw_uleb(&p, end) * c->daf;
			uw_set(c, s, op & 0x3f, UWR_AT, off);
			continue;
		case 3: /* DW_CFA_restore */
			reg = op & 0x3f;
			goto restore;
		}
		switch (op) {
		case 0x00: /* nop */
			continue;
		case 0x01: { /* set_loc */
			uint64_t to;
			if (uw_ptr(&p, end, c->fde_enc, 0, 0, &to))
				return -1;
			if (to > c->pc)
				return 0;
			loc = to;
			continue;
		}
		case 0x02: /* advance_loc1 */
			delta = *p++;
			goto advance;
		case 0x03: /* advance_loc2 */
			delta = UW_LOAD(uint16_t, p);
			p += 2;
			goto advance;
		case 0x04: /* advance_loc4 */
			delta = UW_LOAD(uint32_t, p);
			p += 4;
			goto advance;
		case 0x05: /* offset_extended */
			reg = uw_uleb(&p, end);
			off = (int64_t)uw_uleb(&p, end) * c->daf;
			uw_set(c, s, reg, UWR_AT, off);
			continue;
		case 0x06: /* restore_extended */
			reg = uw_uleb(&p, end);
			goto restore;
		case 0x07: /* undefined */
			uw_set(c, s, uw_uleb(&p, end), UWR_UNDEF, 0);
			continue;
		case 0x08: /* same_value */
			uw_set(c, s, uw_uleb(&p, end), UWR_UNSET, 0);
			continue;
		case 0x09: { /* register: reg's value is in reg2 */
			reg = uw_uleb(&p, end);
			uint64_t reg2 = uw_uleb(&p, end);
			uw_set(c, s, reg, reg2 == reg ? UWR_UNSET : UWR_BAD, 0);
			continue;
		}
		case 0x0a: /* remember_state */
			if (c->depth >= UW_STACK)
				return -1;
			c->stack[c->depth++] = *s;
			continue;
		case 0x0b: /* restore_state: the CFA rule too (as GCC emits it for epilogues) */
			if (c->depth <= 0)
				return -1;
			*s = c->stack[--c->depth];
			continue;
		case 0x0c: /* def_cfa */
			reg = uw_uleb(&p, end);
			s->cfa_reg = reg == 6 || reg == 7 ? (int32_t)reg : UW_CFA_OTHER;
			s->cfa_off = (int64_t)uw_uleb(&p, end);
			continue;
		case 0x0d: /* def_cfa_register */
			reg = uw_uleb(&p, end);
			s->cfa_reg = reg == 6 || reg == 7 ? (int32_t)reg : UW_CFA_OTHER;
			continue;
		case 0x0e: /* def_cfa_offset */
			s->cfa_off = (int64_t)uw_uleb(&p, end);
			continue;
		case 0x0f: /* def_cfa_expression */
			delta = uw_uleb(&p, end);
			p += delta;
			s->cfa_reg = UW_CFA_OTHER;
			continue;
		case 0x10: /* expression */
		case 0x16: /* val_expression */
			reg = uw_uleb(&p, end);
			delta = uw_uleb(&p, end);
			p += delta;
			uw_set(c, s, reg, UWR_BAD, 0);
			continue;
		case 0x11: /* offset_extended_sf */
			reg = uw_uleb(&p, end);
			off = uw_sleb(&p, end) * c->daf;
			uw_set(c, s, reg, UWR_AT, off);
			continue;
		case 0x12: /* def_cfa_sf */
			reg = uw_uleb(&p, end);
			s->cfa_reg = reg == 6 || reg == 7 ? (int32_t)reg : UW_CFA_OTHER;
			s->cfa_off = uw_sleb(&p, end) * c->daf;
			continue;
		case 0x13: /* def_cfa_offset_sf */
			s->cfa_off = uw_sleb(&p, end) * c->daf;
			continue;
		case 0x14: /* val_offset: reg's value is CFA + off (not a saved slot) */
			reg = uw_uleb(&p, end);
			(void)uw_uleb(&p, end);
			uw_set(c, s, reg, UWR_BAD, 0);
			continue;
		case 0x15: /* val_offset_sf */
			reg = uw_uleb(&p, end);
			(void)uw_sleb(&p, end);
			uw_set(c, s, reg, UWR_BAD, 0);
			continue;
		case 0x2e: /* GNU_args_size */
			(void)uw_uleb(&p, end);
			continue;
		case 0x2f: /* GNU_negative_offset_extended */
			reg = uw_uleb(&p, end);
			off = -(int64_t)uw_uleb(&p, end) * c->daf;
			uw_set(c, s, reg, UWR_AT, off);
			continue;
		default:
			return -1;
		}
	advance:
		delta *= c->caf;
		if (delta > c->pc - loc) /* loc + delta > pc: the row at pc is the current one */
			return 0;
		loc += delta;
		continue;
	restore:
		if (reg == 6) {
			s->bp = c->init.bp;
			s->bp_off = c->init.bp_off;
		} else if (reg == c->ra_col) {
			s->ra = c->init.ra;
			s->ra_off = c->init.ra_off;
		}
		continue;
	}
	return 0;
}

/* Computes the rule at `pc` (a call instruction's address, i.e. a return address - 1).
 * 0 and *r, or UW_NO_TABLE (no object, no .eh_frame_hdr). */
static __attribute__((noinline)) uint32_t uw_compute(uint64_t pc, struct uw_rule *r)
{
	struct dl_find_object fo;
	*r = (struct uw_rule){ .kind = UWK_NO_ROWS };
	uw_find_fn find = __atomic_load_n(&uw_find, __ATOMIC_ACQUIRE);
	if (!find || find((void *)(uintptr_t)pc, &fo) != 0 || !fo.dlfo_eh_frame)
		return UW_NO_TABLE;

	/* .eh_frame_hdr: version, eh_frame_ptr_enc, fde_count_enc, table_enc, eh_frame_ptr,
	 * fde_count, then the table of (initial location, FDE address) pairs */
	const uint8_t *hdr = fo.dlfo_eh_frame;
	uint64_t hbase = (uint64_t)(uintptr_t)hdr;
	if (hdr[0] != 1 || hdr[3] != 0x3b) /* DW_EH_PE_datarel | DW_EH_PE_sdata4 */
		return UW_NO_TABLE;
	const uint8_t *p = hdr + 4, *hend = hdr + 64;
	uint64_t eh_frame, count;
	if (uw_ptr(&p, hend, hdr[1], hbase, 0, &eh_frame) ||
	    uw_ptr(&p, hend, hdr[2], hbase, 0, &count))
		return UW_NO_TABLE;
	(void)eh_frame;
	if (count == 0 || count > (1u << 28))
		return 0;
	const int32_t *tab = (const int32_t *)(const void *)p;
	int64_t rel = (int64_t)(pc - hbase);
	if (rel < (int64_t)tab[0])
		return 0;
	uint64_t lo = 0, hi = count; /* the last entry with initial location <= pc */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if ((int64_t)tab[2 * mid] <= rel)
			lo = mid;
		else
			hi = mid;
	}
	const uint8_t *fde = hdr + tab[2 * lo + 1];

	/* the FDE: length, CIE pointer, pc_begin, pc_range, [augmentation data], instructions */
	uint32_t flen = UW_LOAD(uint32_t, fde);
	if (flen == 0 || flen == 0xffffffffu)
		return 0;
	const uint8_t *fend = fde + 4 + flen;
	uint32_t cie_ptr = UW_LOAD(uint32_t, fde + 4);
	if (cie_ptr == 0)
		return 0; /* a CIE, not an FDE */
	const uint8_t *cie = fde + 4 - cie_ptr;

	/* the CIE: length, id 0, version, augmentation, code and data alignment, RA column,
	 * [augmentation data], initial instructions */
	uint32_t clen = UW_LOAD(uint32_t, cie);
	if (clen == 0 || clen == 0xffffffffu || UW_LOAD(uint32_t, cie + 4) != 0)
		return 0;
	const uint8_t *cend = cie + 4 + clen;
	uint8_t version = cie[8];
	if (version != 1 && version != 3 && version != 4)
		return 0;
	const char *aug = (const char *)(cie + 9);
	p = cie + 9;
	while (p < cend && *p)
		p++;
	p++;
	struct uw_ctx c;
	c.pc = pc;
	c.depth = 0;
	c.fde_enc = 0; /* absptr unless 'R' */
	if (version == 4) {
		if (p + 2 > cend || p[0] != 8)
			return 0; /* address size, segment selector size */
		p += 2;
	}
	c.caf = uw_uleb(&p, cend);
	c.daf = uw_sleb(&p, cend);
	c.ra_col = version == 1 ? *p++ : uw_uleb(&p, cend);
	int signal = 0;
	const uint8_t *cinsn = NULL;
	if (aug[0] == 'z') {
		uint64_t alen = uw_uleb(&p, cend);
		cinsn = p + alen;
		for (const char *a = aug + 1; *a; a++) {
			switch (*a) {
			case 'R':
				c.fde_enc = *p++;
				break;
			case 'L':
				p++; /* the LSDA encoding: the FDE's augmentation data is skipped whole */
				break;
			case 'P': {
				uint8_t enc = *p++;
				uint64_t dummy;
				if ((enc & 0x70) == 0x50) /* aligned */
					return 0;
				if (uw_ptr(&p, cend, enc & 0x0f, 0, 1, &dummy))
					return 0;
				break;
			}
			case 'S':
				signal = 1;
				break;
			case 'B':
				break;
			default: /* unknown: the length gets us past the data anyway */
				goto aug_done;
			}
		}
	aug_done:;
	} else if (aug[0] != 0) {
		return 0; /* "eh" and the like: not in x86-64 .eh_frame */
	} else {
		cinsn = p;
	}
	if (signal)
		return 0;

	/* the FDE's pc range */
	p = fde + 8;
	uint64_t pc_begin, pc_range;
	if (uw_ptr(&p, fend, c.fde_enc, 0, 0, &pc_begin) ||
	    uw_ptr(&p, fend, c.fde_enc & 0x0f, 0, 1, &pc_range))
		return 0;
	if (pc < pc_begin || pc - pc_begin >= pc_range)
		return 0;
	if (aug[0] == 'z') {
		uint64_t alen = uw_uleb(&p, fend);
		p += alen;
	}

	struct uw_state s = { .cfa_reg = UW_CFA_OTHER };
	c.init = s;
	c.pc = UINT64_MAX;
	if (uw_run(&c, &s, cinsn, cend, 0))
		return 0;
	c.init = s;
	c.pc = pc;
	c.depth = 0;
	if (uw_run(&c, &s, p, fend, pc_begin))
		return 0;

	if (s.ra == UWR_UNDEF) {
		r->kind = UWK_OUTER;
		return 0;
	}
	if (s.ra != UWR_AT || s.bp == UWR_BAD ||
	    (s.cfa_reg != UW_CFA_RSP && s.cfa_reg != UW_CFA_RBP))
		return 0;
	r->kind = UWK_FRAME;
	r->cfa_bp = s.cfa_reg == UW_CFA_RBP;
	r->cfa_off = s.cfa_off;
	r->bp_kind = s.bp == UWR_AT ? UWB_AT : s.bp == UWR_UNDEF ? UWB_UNDEF : UWB_SAME;
	r->bp_off = s.bp_off;
	r->ra_off = s.ra_off;
	return 0;
}

/* A cache miss at `pc`: computes the rule, caches it when it fits; 0 and *r, or
 * UW_NO_TABLE. */
static __attribute__((noinline)) uint32_t uw_miss(uint64_t pc, uint64_t *slot, struct uw_rule *r)
{
	uint32_t f = uw_compute(pc, r);
	if (f)
		return f;
	uint64_t w = uw_pack(pc, r);
	if (w)
		__atomic_store_n(slot, w, __ATOMIC_RELAXED);
	return 0;
}

/* --- the API --- */

static int uw_avail; /* 0: not checked yet, 1: yes, 2: no */

/* 1 when the unwinder can run in this process (glibc's _dl_find_object is there and knows
 * this library's .eh_frame_hdr); 0 before uw_init. */
static int uw_available(void)
{
	int a = __atomic_load_n(&uw_avail, __ATOMIC_RELAXED);
	uw_find_fn find = __atomic_load_n(&uw_find, __ATOMIC_ACQUIRE);
	if (a == 0 && find) {
		struct dl_find_object fo;
		a = find && find((void *)(uintptr_t)&uw_compute, &fo) == 0 && fo.dlfo_eh_frame
			    ? 1
			    : 2;
		__atomic_store_n(&uw_avail, a, __ATOMIC_RELAXED);
	}
	return a == 1;
}

/* Walks the calling thread's stack from a frame's state right after a call returned into it:
 * `ip` a return address in that frame, `sp` its stack pointer, `bp` its rbp. Stores ips[0] =
 * ip, then the return address of each outer frame, at most `max` entries; returns the count
 * and ORs UW_* bits into *flags. A walk that reaches the outermost frame (the return address
 * undefined, as in _start and clone3) sets none. */
/* The stack pages this thread's walks found mapped: [uw_lo, uw_hi). A frame whose rule is
 * wrong (bad CFI, a rule cached for code since unloaded, a thread entry without an
 * undefined return address) could put its CFA past the top of the stack; its slots are read
 * only after mincore says their page is mapped, once per page and thread. */
static __thread uint64_t uw_lo __attribute__((tls_model("initial-exec")));
static __thread uint64_t uw_hi __attribute__((tls_model("initial-exec")));

static __attribute__((noinline)) int uw_page_mapped(uint64_t addr)
{
	uint64_t page = addr & ~(uint64_t)4095;
	unsigned char v;
	if (mincore((void *)(uintptr_t)page, 4096, &v) != 0)
		return 0;
	if (page == uw_hi && uw_hi)
		uw_hi += 4096;
	else if (page + 4096 == uw_lo)
		uw_lo = page;
	else {
		uw_lo = page;
		uw_hi = page + 4096;
	}
	return 1;
}

/* Whether the 8 bytes at `addr` are on pages known mapped (checking them if not). */
static inline int uw_readable(uint64_t addr)
{
	if (__builtin_expect(addr >= uw_lo && addr + 8 <= uw_hi, 1))
		return 1;
	return uw_page_mapped(addr) && (((addr + 7) & ~(uint64_t)4095) == (addr & ~(uint64_t)4095) ||
					uw_page_mapped(addr + 7));
}

static int uw_walk(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t *ips, int max,
		   uint32_t *flags)
{
	int n = 0;
	if (max <= 0 || ip == 0)
		return 0;
	ips[n++] = ip;
	for (;;) {
		/* the rule at the call: from the cache (the rule in locals, not a struct whose
		 * address escapes: the loop is a chain of dependent loads, kept in registers) */
		uint64_t pc = ip - 1;
		if (__builtin_expect(pc >> 47 != 0, 0)) {
			*flags |= UW_NO_TABLE;
			break;
		}
		uint64_t *slot = &uw_cache[uw_index(pc)];
		uint64_t w = __atomic_load_n(slot, __ATOMIC_RELAXED);
		uint32_t kind, cfa_bp, bp_kind;
		int64_t cfa_off, bp_off, ra_off;
		if (__builtin_expect((w >> 33) == (pc >> 16) && (w & 3) != 0, 1)) {
			kind = (uint32_t)(w & 3);
			cfa_bp = (uint32_t)(w >> 2) & 1;
			cfa_off = (int64_t)((w >> 3) & 0xffff);
			bp_kind = (uint32_t)(w >> 19) & 3;
			bp_off = -8 * (int64_t)((w >> 21) & 0xff);
			ra_off = -8 * (int64_t)((w >> 29) & 0xf);
		} else {
			struct uw_rule r;
			uint32_t f = uw_miss(pc, slot, &r);
			if (f) {
				*flags |= f;
				break;
			}
			kind = r.kind;
			cfa_bp = r.cfa_bp;
			cfa_off = r.cfa_off;
			bp_kind = r.bp_kind;
			bp_off = r.bp_off;
			ra_off = r.ra_off;
		}
		if (__builtin_expect(kind != UWK_FRAME, 0)) {
			if (kind == UWK_NO_ROWS)
				*flags |= UW_NO_ROWS;
			break;
		}
		if (n >= max) {
			*flags |= UW_TRUNCATED;
			break;
		}
		uint64_t cfa = (cfa_bp ? bp : sp) + (uint64_t)cfa_off;
		uint64_t ra_at = cfa + (uint64_t)ra_off;
		if (__builtin_expect(cfa <= sp || cfa - sp >= UW_MAX_FRAME || ra_at < sp ||
					     ra_at + 8 > cfa,
				     0)) {
			*flags |= UW_BAD_FRAME;
			break;
		}
		if (bp_kind == UWB_AT) {
			uint64_t bp_at = cfa + (uint64_t)bp_off;
			if (__builtin_expect(bp_at < sp || bp_at + 8 > cfa || !uw_readable(bp_at), 0)) {
				*flags |= UW_BAD_FRAME;
				break;
			}
			bp = *(const uint64_t *)(uintptr_t)bp_at;
		} else if (bp_kind == UWB_UNDEF) {
			bp = 0;
		}
		if (__builtin_expect(!uw_readable(ra_at), 0)) {
			*flags |= UW_BAD_FRAME;
			break;
		}
		ip = *(const uint64_t *)(uintptr_t)ra_at;
		sp = cfa;
		if (ip == 0)
			break;
		ips[n++] = ip;
	}
	return n;
}
