print("tabd")
