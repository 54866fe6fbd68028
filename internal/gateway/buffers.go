package gateway

import (
	"math/bits"
	"sync"
	"unsafe"
)

// The gateway's byte buffers come from pools of capacities that are
// powers of two from minPooledBody to maxPooledBody: request bodies,
// garbage as soon as the upstream has them, tens of milliseconds after
// they were read, and the copy buffers of responses and of bodies sent
// upstream. These were most of what the gateway allocated per call (a
// 16 KiB body, bench/gateway), so most of what made the collector run.
// A larger body, of a long conversation, is allocated to its size:
// rounded up to a power of two, it would take room from the bound
// (MaxBuffered) that other calls could use.
const (
	minPooledShift = 12 // 4 KiB
	maxPooledShift = 19 // 512 KiB
	minPooledBody  = 1 << minPooledShift
	maxPooledBody  = 1 << maxPooledShift
)

// buffers holds each pooled capacity's buffers by their first byte,
// which an interface holds without the allocation a *[]byte would cost
// on every Put.
var buffers [maxPooledShift - minPooledShift + 1]sync.Pool

// bodyCap is the capacity of the buffer a body of n bytes is read into.
func bodyCap(n int64) int64 {
	if n > maxPooledBody {
		return n
	}
	return max(minPooledBody, int64(1)<<bits.Len64(uint64(n-1)))
}

// sizePool is the pool of buffers of capacity c, or nil when c is not a
// pooled capacity.
func sizePool(c int64) *sync.Pool {
	if c < minPooledBody || c > maxPooledBody || c&(c-1) != 0 {
		return nil
	}
	return &buffers[bits.Len64(uint64(c))-1-minPooledShift]
}

// getBuffer returns an empty buffer of capacity c, from its pool when it
// has one. A pooled buffer holds earlier bytes beyond its length.
func getBuffer(c int64) []byte {
	if p := sizePool(c); p != nil {
		if b, ok := p.Get().(*byte); ok {
			return unsafe.Slice(b, c)[:0]
		}
	}
	return make([]byte, 0, c)
}

// putBuffer gives b to its pool, if it has one. Nothing may use b after.
func putBuffer(b []byte) {
	if p := sizePool(int64(cap(b))); p != nil {
		p.Put(unsafe.SliceData(b[:cap(b)]))
	}
}

// copyBufferSize is the size of the copy buffers, ReverseProxy's default.
const copyBufferSize = 32 << 10

// copyBuffers lends ReverseProxy its copy buffers for responses, and raw
// connections theirs for request bodies, from the pool of their size:
// without it each allocates 32 KiB for every call.
var copyBuffers copyBufferPool

type copyBufferPool struct{}

func (copyBufferPool) Get() []byte    { return getBuffer(copyBufferSize)[:copyBufferSize] }
func (copyBufferPool) Put(buf []byte) { putBuffer(buf) }
