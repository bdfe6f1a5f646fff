//go:build amd64 && !race

#include "textflag.h"

// func store(p *int64, v int64)
// A plain MOV: no LOCK prefix, no XCHG (see the package doc for why that is enough).
TEXT ·store(SB),NOSPLIT,$0-16
	MOVQ	p+0(FP), AX
	MOVQ	v+8(FP), BX
	MOVQ	BX, 0(AX)
	RET
