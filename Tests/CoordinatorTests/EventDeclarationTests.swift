import Coordinator
import Foundation
import Testing

/// Every event kind's fields are declared once (``EventKind/fields``); the encoder, the
/// decoder and the JSON schema are held to that declaration here. A field added to the
/// encoder and not declared, a declared field the decoder does not need or reads under
/// another name, or a schema that lists other fields, fails.
@Suite struct EventDeclarationTests {
    /// Events of `kind`: each optional field present in one of them and absent in another
    /// (an exhaustive switch: a new kind does not compile until it has its samples).
    static func samples(_ kind: EventKind) -> [Event] {
        let tab = TabState(info: TabInfo(id: "home", title: "Home", icon: "house", color: "#007aff", badge: nil), rootPage: "p1")
        let client = ClientInfo(id: "c3", name: "kiosk")
        return switch kind {
        case .selected: [.selected(from: "home", to: "search")]
        case .firstAppear: [.firstAppear(tab: "home", page: "p1")]
        case .appear: [.appear(tab: "home", page: "p1")]
        case .disappear: [.disappear(tab: "home", page: "p1")]
        case .pushed: [.pushed(tab: "home", page: "p4", route: "detail")]
        case .popped: [.popped(tab: "home", pages: ["p5", "p4"])]
        case .scrollToTop: [.scrollToTop(tab: "home", count: 3)]
        case .scrolled: [.scrolled(tab: "home", offset: 120.5)]
        case .valueSet: [.valueSet(tab: "home", key: "draft", value: .string("hello"))]
        case .tabAdded: [.tabAdded(tab, index: 1)]
        case .tabUpdated: [.tabUpdated(tab)]
        case .tabMoved: [.tabMoved(tab: "home", index: 2)]
        case .tabRemoved: [.tabRemoved(tab: "home")]
        case .clientJoined: [.clientJoined(client)]
        case .clientLeft: [.clientLeft("c3")]
        case .presenceCounted: [.presenceCounted(count: 120, nodes: nil), .presenceCounted(count: 120, nodes: ["n1": 100, "n2": 20])]
        case .clientCount: [.clientCount(node: nil, count: 7), .clientCount(node: "n1", count: 7)]
        case .presenceListed: [.presenceListed(node: nil, clients: [client]), .presenceListed(node: "n2", clients: [])]
        case .clientIdsReserved: [.clientIdsReserved(node: nil, from: 1_000, count: 1_000), .clientIdsReserved(node: "n1", from: 2_000, count: 1_000)]
        }
    }

    static func members(_ json: JSONValue) -> [String] { json.objectValue?.map(\.0) ?? [] }

    @Test func everyEncodedEventCarriesExactlyItsKindsDeclaredFieldsInTheirOrder() {
        for kind in EventKind.allCases {
            let declared = kind.fields.map(\.name)
            var seen = Set<String>()
            for event in Self.samples(kind) {
                #expect(event.eventKind == kind)
                let names = Self.members(SequencedEvent(seq: 9, event: event).json)
                #expect(Array(names.prefix(2)) == ["seq", "kind"], "\(kind)")
                let fields = Array(names.dropFirst(2))
                #expect(fields == declared.filter(fields.contains), "\(kind): \(fields) are not the declared \(declared), in order")
                for field in kind.fields where field.required {
                    #expect(fields.contains(field.name), "\(kind) without its required '\(field.name)'")
                }
                seen.formUnion(fields)
            }
            #expect(seen == Set(declared), "\(kind): the samples show \(seen.sorted()), the declaration \(declared)")
        }
    }

    @Test func aFrameOfTheDeclaredFieldsDecodesAndOneWithoutARequiredFieldIsRefusedNamingIt() throws {
        for kind in EventKind.allCases {
            for event in Self.samples(kind) {
                let json = SequencedEvent(seq: 9, event: event).json
                #expect(try SequencedEvent(json: json) == SequencedEvent(seq: 9, event: event), "\(kind) round trip")
                for field in kind.fields where field.required {
                    let without = JSONValue.object((json.objectValue ?? []).filter { $0.0 != field.name })
                    do {
                        _ = try SequencedEvent(json: without)
                        Issue.record("\(kind) without '\(field.name)' decoded")
                    } catch {
                        #expect(error.message.contains("'\(field.name)'"), "\(kind) without '\(field.name)': \(error.message)")
                    }
                }
            }
        }
    }

    @Test func theJSONSchemaDeclaresEachKindWithExactlyItsFields() throws {
        let url = CommandKindCoverageTests.root.appendingPathComponent("docs/schema/event.json")
        let schema = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as! [String: Any]
        let defs = try #require(schema["$defs"] as? [String: Any])
        for kind in EventKind.allCases {
            let def = try #require(defs[kind.rawValue] as? [String: Any], "docs/schema/event.json has no \(kind)")
            let required = Set((def["required"] as? [String]) ?? []).subtracting(["seq", "kind"])
            let properties = Set(((def["properties"] as? [String: Any]) ?? [:]).keys).subtracting(["seq", "kind"])
            #expect(required == Set(kind.fields.filter(\.required).map(\.name)), "the schema's required fields of \(kind)")
            #expect(properties == Set(kind.fields.map(\.name)), "the schema's fields of \(kind)")
        }
    }
}
