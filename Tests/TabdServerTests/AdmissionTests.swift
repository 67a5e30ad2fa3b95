import Auth
import Coordinator
import Testing
@testable import TabdServer

/// Who may connect to which room with which role (the WebSocket upgrade's decision).
@Suite struct AdmissionTests {
    func decide(_ grant: Result<Grant?, AuthError> = .success(nil), origin: String? = nil, host: String? = "tabd.example:8080",
                room: String = "main", context: Admission.Context = .init(),
                roomRefusal: RoomRefusal? = nil) -> Admission.Refusal? {
        Admission.decide(grant: grant, origin: origin, host: host, room: room, context: context, roomRefusal: { roomRefusal })
    }

    @Test func aWellFormedRequestIsAccepted() {
        #expect(decide() == nil)
        #expect(decide(origin: "http://tabd.example:8080") == nil)
        #expect(decide(origin: "https://tabd.example:8080") == nil)
        #expect(decide(.success(Grant(role: .view, scope: .room("main")))) == nil)
    }

    @Test func theRefusalsComeInTheirOrder() {
        let stopped = Admission.Context(stopping: true, connections: 5, maxClients: 5)
        // Everything wrong at once: the credentials win, then the origin, the room id, the token's room…
        #expect(decide(.failure(.expired), origin: "http://evil", room: "a b", context: stopped, roomRefusal: .unknown)?.status == 401)
        #expect(decide(origin: "http://evil", room: "a b", context: stopped, roomRefusal: .unknown)?.status == 403)
        #expect(decide(room: "a b", context: stopped, roomRefusal: .unknown)?.status == 400)
        let other = Result<Grant?, AuthError>.success(Grant(role: .control, scope: .room("other")))
        let refusal = decide(other, context: stopped, roomRefusal: .unknown)
        #expect(refusal == Admission.Refusal(403, "its token is for room 'other', not 'main'", ofCredentials: true))
        // …then stopping, the connection limit, and the room's existence last.
        #expect(decide(context: stopped, roomRefusal: .unknown) == Admission.Refusal(503, nil))
        #expect(decide(context: .init(connections: 5, maxClients: 5), roomRefusal: .unknown)?.why == "--max-clients 5 reached")
        #expect(decide(roomRefusal: .unknown)?.status == 404)
        #expect(decide(context: .init(maxRooms: 7), roomRefusal: .full) == Admission.Refusal(503, "--max-rooms 7 reached, cannot create room 'main'"))
        #expect(decide(roomRefusal: .deleting) == Admission.Refusal(503, nil))
    }

    @Test func theRoomIsAskedForOnlyWhenEverythingElseHolds() {
        var asked = 0
        _ = Admission.decide(grant: .failure(.missing), origin: nil, host: nil, room: "main", context: .init()) { asked += 1; return nil }
        _ = Admission.decide(grant: .success(nil), origin: nil, host: nil, room: "main", context: .init(stopping: true)) { asked += 1; return nil }
        #expect(asked == 0, "the room's existence (a question to the engine in a cluster) is asked last")
        _ = Admission.decide(grant: .success(nil), origin: nil, host: nil, room: "main", context: .init()) { asked += 1; return nil }
        #expect(asked == 1)
    }

    @Test func onlyCredentialRefusalsAreCountedAsSuch() {
        #expect(decide(.failure(.missing))?.ofCredentials == true)
        #expect(decide(origin: "http://evil")?.ofCredentials == false)
        #expect(decide(room: "")?.ofCredentials == false)
    }

    @Test func originsMatchTheHostOrTheAllowList() {
        #expect(!Admission.originAllowed("http://evil", host: "tabd.example", allowOrigins: []))
        #expect(!Admission.originAllowed("http://tabd.example", host: nil, allowOrigins: []))
        #expect(!Admission.originAllowed("http://tabd.example", host: "", allowOrigins: []))
        #expect(!Admission.originAllowed("http://tabd.example:1", host: "tabd.example", allowOrigins: []))
        #expect(Admission.originAllowed("https://app.example", host: "tabd.example", allowOrigins: ["https://app.example"]))
        #expect(Admission.originAllowed("https://app.example", host: nil, allowOrigins: ["https://app.example"]))
        // A forged origin in the log is made printable.
        #expect(decide(origin: "http://x\n2026 INFO forged")?.why?.contains("\n") == false)
    }

    @Test func theRoleIsTheCredentialsRoleInTheRoom() {
        #expect(Admission.role(.success(nil), in: "a") == .control)
        #expect(Admission.role(.failure(.expired), in: "a") == nil)
        #expect(Admission.role(.success(Grant(role: .view, scope: .every)), in: "a") == .view)
        #expect(Admission.role(.success(Grant(role: .admin, scope: .room("b"))), in: "a") == nil)
        #expect(Admission.room(query: [:]) == Limits.defaultRoom)
        #expect(Admission.room(query: ["room": "kiosk"]) == "kiosk")
    }
}
