/// A FIFO queue on a growable circular buffer: O(1) append, removeFirst and random access.
/// (The toolchain has no Deque; this is the part of one the connection table needs.)
///
/// `@inlinable` so that other modules (the connection tables') get it specialized for their
/// element: unspecialized, every access looked up generic metadata at run time (5% of the
/// server's CPU at 1,000 clients). That takes public declarations (`@inlinable package` ones
/// are not optimized across modules by this toolchain), so it is SPI: only modules that
/// `@_spi(Engine) import WebSocketEngine` see it.
@_spi(Engine) public struct Ring<Element> {
    @inlinable public init() {}

    @usableFromInline var slots: [Element?] = []
    @usableFromInline var head = 0
    @usableFromInline var stored = 0
    @inlinable public var count: Int { stored }

    @inlinable public var isEmpty: Bool { count == 0 }

    @inlinable public var first: Element? { count == 0 ? nil : slots[head] }

    /// The element `index` places after the first one.
    @inlinable public subscript(index: Int) -> Element {
        precondition(index >= 0 && index < count, "Ring index out of range")
        return slots[(head + index) & (slots.count - 1)]!
    }

    @inlinable public mutating func append(_ element: Element) {
        if count == slots.count { grow() }
        slots[(head + count) & (slots.count - 1)] = element
        stored += 1
    }

    @discardableResult
    @inlinable public mutating func removeFirst() -> Element {
        precondition(count > 0, "removeFirst on an empty Ring")
        let element = slots[head].take()!
        head = (head + 1) & (slots.count - 1)
        stored -= 1
        return element
    }

    /// Removes the first `k` elements (all of them if `k >= count`).
    @inlinable public mutating func removeFirst(_ k: Int) {
        if k >= count {
            removeAll()
            return
        }
        for _ in 0..<k { removeFirst() }
    }

    /// Empties the ring and gives back its memory once it had grown large.
    @inlinable public mutating func removeAll() {
        if slots.count > 1024 {
            slots = []
        } else {
            for i in slots.indices { slots[i] = nil }
        }
        head = 0
        stored = 0
    }

    /// The first index in `0..<count` whose element does not satisfy `isBefore`, given that
    /// the elements satisfying it all come first (binary search).
    @inlinable public func partitionPoint(_ isBefore: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let mid = (low + high) / 2
            if isBefore(self[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    @usableFromInline mutating func grow() {
        let newCapacity = Swift.max(8, slots.count * 2)  // always a power of two
        var newSlots = [Element?](repeating: nil, count: newCapacity)
        for i in 0..<count {
            newSlots[i] = slots[(head + i) & (slots.count - 1)]
        }
        slots = newSlots
        head = 0
    }
}

extension Ring: Sendable where Element: Sendable {}

extension Ring {
    @inlinable public init(_ elements: some Sequence<Element>) {
        self.init()
        for element in elements { append(element) }
    }
}
